import Foundation
import Glibc
import GuidanceProtocol
public import Logging
import NIOPosix
import SQLiteNIO
public import ServiceLifecycle
import Synchronization
import UTC

/// The usage ledger in one SQLite file, for a server that runs alone (the default).
///
/// - WAL mode, so `guidance-server usage` and `credit` read and write while the server runs;
///   `synchronous=FULL`, so a charge is on disk before its segment is acknowledged and survives a
///   power cut, not only a crash.
/// - Every change is one statement: rows appended to `usage_events` or `credits`, whose trigger
///   updates `balances` in the same implicit transaction. So no two callers' transactions can
///   interleave on the shared connection, and no event is ever without its balance.
/// - Charges are written in groups (``ChargeBatches``): the charges that arrive while one group
///   is written are the next group, one `INSERT` of all their rows, so one commit and one fsync.
///   Each charge is on disk before its result is returned, so before its segment is acknowledged.
/// - The write-ahead log is copied back into the file (checkpointed) by ``Checkpoints``, a
///   service beside the server, on a connection of its own, every second: left to the
///   connection that writes, a checkpoint ran inside a charge every few thousand charges and
///   held every segment's `ack` behind it (hundreds of milliseconds at 1000 charges a second).
///   SQLite's own checkpoint, at 1000 pages of log, stays as the fallback.
/// - One instance only: it does not fence charges (``UsageCharge/fence`` is ignored); several
///   instances share a ``PostgresLedger`` instead.
public final class SQLiteLedger: UsageLedger {
    public let path: String

    /// How long a statement waits for another process's write to end.
    static let busyTimeoutMs = 10_000

    /// Schema version, in `PRAGMA user_version`.
    static let version = 4

    static let schema = [
        """
        CREATE TABLE IF NOT EXISTS usage_events (
            device TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL,
            sha256 TEXT NOT NULL, seconds INTEGER NOT NULL CHECK (seconds >= 0), at TEXT NOT NULL,
            PRIMARY KEY (device, stream, seq))
        """,
        """
        CREATE TABLE IF NOT EXISTS credits (
            id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL,
            seconds INTEGER NOT NULL CHECK (seconds > 0), note TEXT NOT NULL, at TEXT NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS balances (
            device TEXT PRIMARY KEY, credited INTEGER NOT NULL DEFAULT 0,
            spent INTEGER NOT NULL DEFAULT 0, segments INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0)
        """,
        """
        CREATE TABLE IF NOT EXISTS model_usage (
            device TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL, model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL CHECK (input_tokens >= 0), output_tokens INTEGER NOT NULL CHECK (output_tokens >= 0),
            at TEXT NOT NULL, PRIMARY KEY (device, stream, seq))
        """,
        // Schema 3: pairing (owners, device authorizations, paired devices, refresh tokens). Times
        // are milliseconds since the Unix epoch; codes and tokens are stored only as hashes.
        """
        CREATE TABLE IF NOT EXISTS owners (
            id INTEGER PRIMARY KEY AUTOINCREMENT, email TEXT NOT NULL UNIQUE, display_name TEXT NOT NULL,
            password_hash TEXT, created_at INTEGER NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS device_authorizations (
            device_code_hash TEXT PRIMARY KEY, user_code TEXT NOT NULL UNIQUE, device_name TEXT NOT NULL,
            state TEXT NOT NULL, owner INTEGER, issued_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
            interval_s INTEGER NOT NULL, last_polled_at INTEGER)
        """,
        """
        CREATE TABLE IF NOT EXISTS paired_devices (
            device TEXT PRIMARY KEY, owner INTEGER NOT NULL REFERENCES owners (id), label TEXT NOT NULL,
            paired_at INTEGER NOT NULL, last_seen_at INTEGER, unpaired_at INTEGER)
        """,
        """
        CREATE TABLE IF NOT EXISTS refresh_families (
            id TEXT PRIMARY KEY, device TEXT NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER)
        """,
        """
        CREATE TABLE IF NOT EXISTS refresh_tokens (
            hash TEXT PRIMARY KEY, family TEXT NOT NULL REFERENCES refresh_families (id), issued_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL, spent_at INTEGER, successor TEXT)
        """,
        "CREATE TABLE IF NOT EXISTS code_entry_failures (key TEXT NOT NULL, at INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS code_entry_failures_key ON code_entry_failures (key, at)",
        // The owners' pages: one-time password links, web sessions, the cars' last guidance,
        // purchases (one row per provider payment id: a webhook credits once).
        """
        CREATE TABLE IF NOT EXISTS password_links (
            token_hash TEXT PRIMARY KEY, owner INTEGER NOT NULL, expires_at INTEGER NOT NULL, used_at INTEGER)
        """,
        "CREATE TABLE IF NOT EXISTS web_sessions (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires_at INTEGER)",
        "CREATE TABLE IF NOT EXISTS device_guidance (device TEXT NOT NULL, at INTEGER NOT NULL, text TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS device_guidance_device ON device_guidance (device, at)",
        // The cars' drives (``TripStore``): a summary per trip, and its points.
        """
        CREATE TABLE IF NOT EXISTS device_trips (
            device TEXT NOT NULL, start_at INTEGER NOT NULL, end_at INTEGER NOT NULL, distance_m REAL NOT NULL, top_speed REAL NOT NULL,
            start_lat REAL NOT NULL, start_lon REAL NOT NULL, end_lat REAL NOT NULL, end_lon REAL NOT NULL, PRIMARY KEY (device, start_at))
        """,
        "CREATE TABLE IF NOT EXISTS device_track (device TEXT NOT NULL, at INTEGER NOT NULL, lat REAL NOT NULL, lon REAL NOT NULL, speed REAL NOT NULL)",
        "CREATE INDEX IF NOT EXISTS device_track_device ON device_track (device, at)",
        "CREATE INDEX IF NOT EXISTS device_track_at ON device_track (at)",
        """
        CREATE TABLE IF NOT EXISTS payments (
            provider TEXT NOT NULL, payment_id TEXT NOT NULL, owner INTEGER NOT NULL, device TEXT NOT NULL,
            product TEXT NOT NULL, seconds INTEGER NOT NULL CHECK (seconds > 0), price TEXT NOT NULL, status TEXT NOT NULL,
            created_at INTEGER NOT NULL, settled_at INTEGER, PRIMARY KEY (provider, payment_id))
        """,
        """
        CREATE TRIGGER IF NOT EXISTS model_usage_balance AFTER INSERT ON model_usage BEGIN
            INSERT INTO balances (device, input_tokens, output_tokens) VALUES (NEW.device, NEW.input_tokens, NEW.output_tokens)
            ON CONFLICT (device) DO UPDATE SET input_tokens = input_tokens + NEW.input_tokens,
                output_tokens = output_tokens + NEW.output_tokens;
        END
        """,
        """
        CREATE TRIGGER IF NOT EXISTS usage_events_balance AFTER INSERT ON usage_events BEGIN
            INSERT INTO balances (device, spent, segments) VALUES (NEW.device, NEW.seconds, 1)
            ON CONFLICT (device) DO UPDATE SET spent = spent + NEW.seconds, segments = segments + 1;
        END
        """,
        """
        CREATE TRIGGER IF NOT EXISTS credits_balance AFTER INSERT ON credits BEGIN
            INSERT INTO balances (device, credited) VALUES (NEW.device, NEW.seconds)
            ON CONFLICT (device) DO UPDATE SET credited = credited + NEW.seconds;
        END
        """
    ]

    /// Columns added after a table was first made (schema 4: who looked a code up and the wrong
    /// guesses against it; whose web session a row is), added where they are missing.
    static let addedColumns: [(table: String, column: String, definition: String)] = [
        ("device_authorizations", "looked_up_by", "INTEGER"),
        ("device_authorizations", "wrong_decisions", "INTEGER NOT NULL DEFAULT 0"),
        ("web_sessions", "owner", "INTEGER"),
        ("owners", "time_zone", "TEXT"),
        ("owners", "language", "TEXT"),
        ("owners", "impact_mail", "INTEGER NOT NULL DEFAULT 0")
    ]

    /// Opens (and creates, the first time) the ledger at `path`, and waits until it is ready, so
    /// that a problem shows at start. `:memory:` is a ledger that lasts as long as the process.
    public static func open(path: String, logger: Logger) async throws -> SQLiteLedger {
        let ledger = SQLiteLedger(path: path, logger: logger)
        _ = try await ledger.connection()
        return ledger
    }

    /// The ledger at `path`, opened in the background; its first use waits for it.
    public init(path: String, logger: Logger) {
        self.path = path
        opening = Task { try await Self.prepare(path: path, logger: logger) }
    }

    private let opening: Task<SQLiteConnection, any Error>
    private let batches = ChargeBatches()
    /// Whether ``shutdown()`` closed the connection: SQLiteNIO's `close()` a second time crashes.
    private let closed = Mutex(false)

    /// A ledger dropped without ``shutdown()`` still closes its file (SQLiteNIO requires it).
    deinit {
        guard !closed.withLock({ $0 }) else { return }
        let opening = self.opening
        Task { try? await opening.value.close() }
    }

    private func connection() async throws -> SQLiteConnection { try await opening.value }

    /// A connection to the ledger's file with what every connection needs (these are the
    /// connection's settings, not the file's): the busy timeout, WAL, `synchronous=FULL`.
    static func connect(path: String, threadPool: NIOThreadPool = .singleton, logger: Logger) async throws -> SQLiteConnection {
        let connection: SQLiteConnection
        // A new ledger is private to the server's user from its first byte (SQLite makes its
        // -wal and -shm files with the same mode): it holds password hashes and sessions.
        if path != ":memory:" {
            let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd) }
        }
        do {
            connection = try await SQLiteConnection.open(
                storage: path == ":memory:" ? .memory : .file(path: path), threadPool: threadPool, logger: logger,
                on: MultiThreadedEventLoopGroup.singleton.any())
        } catch {
            throw LedgerError.unavailable("cannot open the usage ledger \(path): \(error)")
        }
        do {
            // Another process's write (`credit`, a backup) holds the file briefly: wait for it,
            // sleeping, up to 10 s, then fail the charge (not acknowledged, so re-sent later).
            // SQLiteNIO's own busy handler retries at once, forever: a core spent for as long as
            // the other writer holds on.
            _ = try await connection.query("PRAGMA busy_timeout = \(busyTimeoutMs)")
            let mode = try await connection.query("PRAGMA journal_mode=WAL").first?.column("journal_mode")?.string
            guard mode == "wal" || (path == ":memory:" && mode == "memory") else {
                throw LedgerError.unavailable("\(path): WAL mode refused (journal_mode is \(mode ?? "?"))")
            }
            _ = try await connection.query("PRAGMA synchronous=FULL")
        } catch {
            try? await connection.close()
            throw error as? LedgerError ?? .unavailable("cannot prepare the usage ledger \(path): \(error)")
        }
        return connection
    }

    /// A connection to the ledger at `path` whose schema is this server's, migrated if it was older.
    static func prepare(path: String, threadPool: NIOThreadPool = .singleton, logger: Logger) async throws -> SQLiteConnection {
        let connection = try await connect(path: path, threadPool: threadPool, logger: logger)
        do {
            // The schema and its version change together or not at all (SQLite's DDL and
            // user_version are transactional): a kill half way leaves the old schema, whole. The
            // write lock is taken first, so two servers starting at once do not both migrate.
            _ = try await connection.query("BEGIN IMMEDIATE")
            do {
                let found = try await connection.query("PRAGMA user_version").first?.column("user_version")?.integer ?? 0
                guard found <= version else {
                    throw LedgerError.unavailable("\(path): made by a newer guidance-server (schema \(found), this one knows \(version))")
                }
                if found == 1 {
                    // Schema 1 had no token totals.
                    _ = try await connection.query("ALTER TABLE balances ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0")
                    _ = try await connection.query("ALTER TABLE balances ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0")
                }
                for statement in schema { _ = try await connection.query(statement) }
                for added in addedColumns {
                    let columns = try await connection.query("PRAGMA table_info(\(added.table))").compactMap { $0.column("name")?.string }
                    if !columns.contains(added.column) {
                        _ = try await connection.query("ALTER TABLE \(added.table) ADD COLUMN \(added.column) \(added.definition)")
                    }
                }
                _ = try await connection.query("CREATE INDEX IF NOT EXISTS web_sessions_owner ON web_sessions (owner)")
                _ = try await connection.query("PRAGMA user_version = \(version)")
                _ = try await connection.query("COMMIT")
            } catch {
                _ = try? await connection.query("ROLLBACK")
                throw error
            }
        } catch {
            try? await connection.close()
            throw error as? LedgerError ?? .unavailable("cannot prepare the usage ledger \(path): \(error)")
        }
        return connection
    }

    public func charge(_ charge: UsageCharge) async throws -> ChargeResult {
        try LedgerLimits.check(charge)
        return try await batches.charge(charge) { group in
            // The group is everyone's charges, not only this caller's: a caller cancelled now (its
            // session ended) must not fail the others' with it.
            do { return try await uninterrupted { try await self.write(group) }.map { .success($0) } } catch {
                return group.map { _ in .failure(error) }
            }
        }
    }

    /// Writes `group` as one statement (one transaction): a result for each charge, in order. Of
    /// two charges with one key, the first is charged and the second already was. The balance of
    /// each is its device's after the whole group. If the statement fails, the whole group fails:
    /// none is acknowledged, and a charge written anyway is recognised when its segment is re-sent.
    private func write(_ group: [UsageCharge]) async throws -> [ChargeResult] {
        let connection = try await connection()
        let at = SQLiteData.text(Self.now())
        var binds: [SQLiteData] = []
        binds.reserveCapacity(group.count * 6)
        for charge in group {
            binds += [.text(charge.device), .text(charge.stream), .integer(charge.seq), .text(charge.sha256), .integer(charge.seconds), at]
        }
        let rows = Array(repeating: "(?, ?, ?, ?, ?, ?)", count: group.count).joined(separator: ", ")
        struct Key: Hashable { let device: String, stream: String, seq: Int }
        var inserted = Set(
            try await connection.query(
                """
                INSERT INTO usage_events (device, stream, seq, sha256, seconds, at) VALUES \(rows)
                ON CONFLICT (device, stream, seq) DO NOTHING RETURNING device, stream, seq
                """, binds
            ).map { row in
                Key(
                    device: row.column("device")?.string ?? "", stream: row.column("stream")?.string ?? "",
                    seq: row.column("seq")?.integer ?? -1)
            })
        let devices = Array(Set(group.map(\.device)))
        let balances = Dictionary(
            try await connection.query(
                """
                SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances
                WHERE device IN (\(Array(repeating: "?", count: devices.count).joined(separator: ", ")))
                """, devices.map { .text($0) }
            ).map(Self.balance).map { ($0.device, $0) }, uniquingKeysWith: { first, _ in first })
        var results: [ChargeResult] = []
        results.reserveCapacity(group.count)
        for charge in group {
            let balance = balances[charge.device] ?? DeviceBalance(device: charge.device)
            if inserted.remove(Key(device: charge.device, stream: charge.stream, seq: charge.seq)) != nil {
                results.append(.charged(balance))
                continue
            }
            let stored =
                try await connection.query(
                    "SELECT sha256 FROM usage_events WHERE device = ? AND stream = ? AND seq = ?",
                    [.text(charge.device), .text(charge.stream), .integer(charge.seq)]
                ).first?.column("sha256")?.string ?? ""
            results.append(.alreadyCharged(balance, sha256: stored))
        }
        return results
    }

    public func credit(device: String, seconds: Int, note: String) async throws -> DeviceBalance {
        try LedgerLimits.checkCredit(device: device, seconds: seconds)
        _ = try await connection().query(
            "INSERT INTO credits (device, seconds, note, at) VALUES (?, ?, ?, ?)",
            [.text(device), .integer(seconds), .text(note), .text(Self.now())])
        return try await balance(device: device)
    }

    public func recordModelUsage(_ usage: ModelUsage) async throws {
        try LedgerLimits.check(usage)
        _ = try await connection().query(
            """
            INSERT INTO model_usage (device, stream, seq, model, input_tokens, output_tokens, at) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (device, stream, seq) DO NOTHING
            """,
            [
                .text(usage.device), .text(usage.stream), .integer(usage.seq), .text(usage.model),
                .integer(usage.inputTokens), .integer(usage.outputTokens), .text(Self.now())
            ])
    }

    public func balance(device: String) async throws -> DeviceBalance {
        let rows = try await connection().query(
            "SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances WHERE device = ?", [.text(device)])
        return rows.first.map(Self.balance) ?? DeviceBalance(device: device)
    }

    public func balances() async throws -> [DeviceBalance] {
        try await connection().query(
            "SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances ORDER BY device"
        ).map(Self.balance)
    }

    /// Checkpoints the ledger's write-ahead log every ``interval``, until graceful shutdown.
    public struct Checkpoints: Service {
        public let path: String
        public let logger: Logger
        public static let interval = Duration.seconds(1)

        public func run() async throws {
            // In memory there is no log to copy; a service that returned would end the server.
            guard path != ":memory:" else { return try await gracefulShutdown() }
            // A thread of its own: a checkpoint waits for the disk, and the charges' threads must not.
            let thread = NIOThreadPool(numberOfThreads: 1)
            thread.start()
            defer { thread.shutdownGracefully { _ in } }
            let connection = try await SQLiteLedger.connect(path: path, threadPool: thread, logger: logger)
            try? await cancelWhenGracefulShutdown {
                var failures = RateLimit(interval: .seconds(60))
                while !Task.isCancelled {
                    try await Task.sleep(for: Self.interval)
                    do {
                        // PASSIVE: copies what no reader still needs; never waits for the writer, nor blocks it.
                        _ = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)")
                    } catch {
                        if failures.allows(now: StreamSession.now()) { logger.warning("usage ledger \(path): checkpoint failed: \(error)") }
                    }
                }
            }
            try? await connection.close()
        }
    }

    /// Closes the file now; `deinit` does it otherwise. Closing twice is harmless.
    public func shutdown() async throws {
        let first = closed.withLock { closed in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        try await connection().close()
    }

    private static func balance(_ row: SQLiteRow) -> DeviceBalance {
        DeviceBalance(
            device: row.column("device")?.string ?? "", creditedSeconds: row.column("credited")?.integer ?? 0,
            spentSeconds: row.column("spent")?.integer ?? 0, segments: row.column("segments")?.integer ?? 0,
            inputTokens: row.column("input_tokens")?.integer ?? 0, outputTokens: row.column("output_tokens")?.integer ?? 0)
    }

    static func now() -> String { Date().rfc3339Milliseconds }
}

/// The values every ledger refuses, whatever it stores them in.
enum LedgerLimits {
    /// More than any device could spend or be credited in a lifetime (3 × 10^10 years), and far
    /// from overflowing a sum of many.
    static let maxSeconds = 1_000_000_000_000

    static func check(_ charge: UsageCharge) throws(LedgerError) {
        guard !charge.device.isEmpty, !charge.stream.isEmpty else { throw .invalid("a charge needs a device and a stream") }
        guard charge.seq >= 0 else { throw .invalid("seq \(charge.seq) is negative") }
        guard (0...maxSeconds).contains(charge.seconds) else { throw .invalid("seconds \(charge.seconds) is not within 0…\(maxSeconds)") }
        guard charge.sha256.utf8.count == 64 else { throw .invalid("sha256 is not 64 hex digits") }
    }

    /// Token counts are what one request can spend: well under 2^31.
    static func check(_ usage: ModelUsage) throws(LedgerError) {
        guard !usage.device.isEmpty, !usage.stream.isEmpty, usage.seq >= 0 else {
            throw .invalid("model usage needs a device, a stream and a seq ≥ 0")
        }
        guard (0...Int(Int32.max)).contains(usage.inputTokens), (0...Int(Int32.max)).contains(usage.outputTokens) else {
            throw .invalid("token counts \(usage.inputTokens)/\(usage.outputTokens) are not within 0…\(Int32.max)")
        }
    }

    static func checkCredit(device: String, seconds: Int) throws(LedgerError) {
        guard !device.isEmpty else { throw .invalid("a credit needs a device") }
        guard (1...maxSeconds).contains(seconds) else { throw .invalid("seconds \(seconds) is not within 1…\(maxSeconds)") }
    }
}

/// Charges written in groups, one group at a time: a charge that arrives while a group is written
/// waits, and the next group is everything that waited. The caller whose turn it is writes the
/// group, then hands the turn to the first charge that arrived meanwhile: no task outlives its
/// caller, and no charge waits for more than the group before its own.
final class ChargeBatches: Sendable {
    private enum Turn { case write, done(Result<ChargeResult, any Error>) }
    private struct Waiting {
        let charge: UsageCharge
        let turn: CheckedContinuation<Turn, Never>
    }
    private let state = Mutex<(waiting: [Waiting], writing: Bool)>(([], false))

    /// Most charges in one group (6 values each, well under SQLite's 32 766 per statement).
    static let maxGroup = 500

    /// `write` gets the group, this charge first, and returns a result for each, in order.
    func charge(_ charge: UsageCharge, write: ([UsageCharge]) async -> [Result<ChargeResult, any Error>]) async throws -> ChargeResult {
        let turn = await withCheckedContinuation { (turn: CheckedContinuation<Turn, Never>) in
            state.withLock { state in
                if state.writing {
                    state.waiting.append(Waiting(charge: charge, turn: turn))
                } else {
                    state.writing = true
                    turn.resume(returning: .write)
                }
            }
        }
        if case .done(let result) = turn { return try result.get() }
        let others = state.withLock { state in
            let taken = Array(state.waiting.prefix(Self.maxGroup - 1))
            state.waiting.removeFirst(taken.count)
            return taken
        }
        let results = await write([charge] + others.map(\.charge))
        // The next group's writer first: resumed after this group's charges, it would wait for all
        // of them to run (their acks, their logs) before its group could start.
        state.withLock { state in
            if state.waiting.isEmpty {
                state.writing = false
            } else {
                state.waiting.removeFirst().turn.resume(returning: .write)
            }
        }
        let missing = Result<ChargeResult, any Error>.failure(LedgerError.unavailable("the ledger returned no result for a charge"))
        for (index, other) in others.enumerated() {
            other.turn.resume(returning: .done(index + 1 < results.count ? results[index + 1] : missing))
        }
        return try (results.first ?? missing).get()
    }
}
