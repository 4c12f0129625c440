import Foundation
public import Logging
import SQLiteNIO
import Synchronization

/// The usage ledger in one SQLite file, for a server that runs alone (the default).
///
/// - WAL mode, so `guidance-server usage` and `credit` read and write while the server runs;
///   `synchronous=FULL`, so a charge is on disk before its segment is acknowledged and survives a
///   power cut, not only a crash.
/// - Every change is one statement: a row appended to `usage_events` or `credits`, whose trigger
///   updates `balances` in the same implicit transaction. So no two callers' transactions can
///   interleave on the shared connection, and no event is ever without its balance.
/// - One instance only: it does not fence charges (``UsageCharge/fence`` is ignored); several
///   instances share a ``PostgresLedger`` instead.
public final class SQLiteLedger: UsageLedger {
    public let path: String

    /// How long a statement waits for another process's write to end.
    static let busyTimeoutMs = 10_000

    /// Schema version, in `PRAGMA user_version`.
    static let version = 2

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
        """,
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
    /// Whether ``shutdown()`` closed the connection: SQLiteNIO's `close()` a second time crashes.
    private let closed = Mutex(false)

    /// A ledger dropped without ``shutdown()`` still closes its file (SQLiteNIO requires it).
    deinit {
        guard !closed.withLock({ $0 }) else { return }
        let opening = self.opening
        Task { try? await opening.value.close() }
    }

    private func connection() async throws -> SQLiteConnection { try await opening.value }

    private static func prepare(path: String, logger: Logger) async throws -> SQLiteConnection {
        let connection: SQLiteConnection
        do {
            connection = try await SQLiteConnection.open(storage: path == ":memory:" ? .memory : .file(path: path), logger: logger)
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
        let inserted = try await connection().query(
            """
            INSERT INTO usage_events (device, stream, seq, sha256, seconds, at) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (device, stream, seq) DO NOTHING RETURNING seq
            """,
            [.text(charge.device), .text(charge.stream), .integer(charge.seq), .text(charge.sha256),
             .integer(charge.seconds), .text(Self.now())])
        let balance = try await balance(device: charge.device)
        if !inserted.isEmpty { return .charged(balance) }
        let stored = try await connection().query(
            "SELECT sha256 FROM usage_events WHERE device = ? AND stream = ? AND seq = ?",
            [.text(charge.device), .text(charge.stream), .integer(charge.seq)]).first?.column("sha256")?.string ?? ""
        return .alreadyCharged(balance, sha256: stored)
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
            [.text(usage.device), .text(usage.stream), .integer(usage.seq), .text(usage.model),
             .integer(usage.inputTokens), .integer(usage.outputTokens), .text(Self.now())])
    }

    public func balance(device: String) async throws -> DeviceBalance {
        let rows = try await connection().query(
            "SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances WHERE device = ?", [.text(device)])
        return rows.first.map(Self.balance) ?? DeviceBalance(device: device)
    }

    public func balances() async throws -> [DeviceBalance] {
        try await connection().query(
            "SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances ORDER BY device").map(Self.balance)
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

    static func now() -> String { Date().formatted(.iso8601) }
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
        guard !usage.device.isEmpty, !usage.stream.isEmpty, usage.seq >= 0 else { throw .invalid("model usage needs a device, a stream and a seq ≥ 0") }
        guard (0...Int(Int32.max)).contains(usage.inputTokens), (0...Int(Int32.max)).contains(usage.outputTokens) else {
            throw .invalid("token counts \(usage.inputTokens)/\(usage.outputTokens) are not within 0…\(Int32.max)")
        }
    }

    static func checkCredit(device: String, seconds: Int) throws(LedgerError) {
        guard !device.isEmpty else { throw .invalid("a credit needs a device") }
        guard (1...maxSeconds).contains(seconds) else { throw .invalid("seconds \(seconds) is not within 1…\(maxSeconds)") }
    }
}
