import Foundation
public import Logging
import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Ledger and leases in one PostgreSQL database, shared by every instance of a fleet's server.
/// ``services`` (the client's connection pool and the lease listener) must run beside whatever
/// uses ``ledger`` and ``leases``: the server puts them in its service group.
public struct PostgresStore: Sendable {
    public let ledger: PostgresLedger
    public let leases: PostgresLeases
    public let services: [any Service]
    /// What ``ledger`` alone needs running, for a command that leases no session: the client's
    /// pool, without the lease listener.
    public let ledgerServices: [any Service]

    /// `url`: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, plain TCP (loopback or a private
    /// network; TLS to PostgreSQL is not configured here).
    public init(url: String, logger: Logger) throws {
        guard let parts = URLComponents(string: url), let host = parts.host, parts.path.count > 1 else {
            throw LedgerError.unavailable("ledger: '\(ServerConfig.redacted(url))' is not postgres://USER@HOST:PORT/DATABASE")
        }
        let (port, user, database) = (parts.port ?? 5432, parts.user ?? "postgres", String(parts.path.dropFirst()))
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: user, password: parts.password, database: database, tls: .disable)
        // Each instance's connections say whose they are (pg_stat_activity's application_name).
        let instance = UUID().uuidString
        configuration.options.additionalStartupParameters = [("application_name", "guidance-server \(instance)")]
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let schema = PostgresSchema(client: client, logger: logger)
        let target = "\(user)@\(host):\(port)/\(database)"
        let probe = PostgresLedger.Probe(
            configuration: .init(host: host, port: port, username: user, password: parts.password, database: database, tls: .disable),
            target: target)
        ledger = PostgresLedger(client: client, schema: schema, probe: probe, logger: logger)
        leases = PostgresLeases(client: client, schema: schema, instance: instance, target: target, logger: logger)
        services = [client, PostgresLeases.Listener(leases: leases)]
        ledgerServices = [client]
    }
}

/// The tables, made once per process (and safely by two instances starting together).
actor PostgresSchema {
    let client: PostgresClient
    let logger: Logger
    private var ready = false

    init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    func ensure() async throws {
        guard !ready else { return }
        let (client, logger) = (self.client, self.logger)
        try await PostgresUnit.transaction(client, logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(7231701)", logger: logger)
            for statement in Self.statements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        }
        ready = true
    }

    static let statements = [
        """
        CREATE TABLE IF NOT EXISTS usage_events (
            device TEXT NOT NULL, stream TEXT NOT NULL, seq BIGINT NOT NULL, sha256 TEXT NOT NULL,
            seconds BIGINT NOT NULL CHECK (seconds >= 0), at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (device, stream, seq))
        """,
        """
        CREATE TABLE IF NOT EXISTS credits (
            id BIGSERIAL PRIMARY KEY, device TEXT NOT NULL, seconds BIGINT NOT NULL CHECK (seconds > 0),
            note TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT now())
        """,
        """
        CREATE TABLE IF NOT EXISTS balances (
            device TEXT PRIMARY KEY, credited BIGINT NOT NULL DEFAULT 0, spent BIGINT NOT NULL DEFAULT 0,
            segments BIGINT NOT NULL DEFAULT 0)
        """,
        "ALTER TABLE balances ADD COLUMN IF NOT EXISTS input_tokens BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE balances ADD COLUMN IF NOT EXISTS output_tokens BIGINT NOT NULL DEFAULT 0",
        """
        CREATE TABLE IF NOT EXISTS model_usage (
            device TEXT NOT NULL, stream TEXT NOT NULL, seq BIGINT NOT NULL, model TEXT NOT NULL,
            input_tokens BIGINT NOT NULL CHECK (input_tokens >= 0), output_tokens BIGINT NOT NULL CHECK (output_tokens >= 0),
            at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (device, stream, seq))
        """,
        """
        CREATE TABLE IF NOT EXISTS session_leases (
            device TEXT PRIMARY KEY, instance TEXT NOT NULL, session TEXT NOT NULL, epoch BIGINT NOT NULL,
            acquired_at TIMESTAMPTZ NOT NULL DEFAULT now())
        """,
        // Pairing and the owners' pages (PostgresPairingStore), as in SQLite's schema 3: times in
        // milliseconds since the Unix epoch, codes and tokens only as hashes.
        """
        CREATE TABLE IF NOT EXISTS owners (
            id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL UNIQUE, display_name TEXT NOT NULL, password_hash TEXT,
            created_at BIGINT NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS device_authorizations (
            device_code_hash TEXT PRIMARY KEY, user_code TEXT NOT NULL UNIQUE, device_name TEXT NOT NULL, state TEXT NOT NULL,
            owner BIGINT, issued_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, interval_s BIGINT NOT NULL, last_polled_at BIGINT)
        """,
        """
        CREATE TABLE IF NOT EXISTS paired_devices (
            device TEXT PRIMARY KEY, owner BIGINT NOT NULL REFERENCES owners (id), label TEXT NOT NULL, paired_at BIGINT NOT NULL,
            last_seen_at BIGINT, unpaired_at BIGINT)
        """,
        "CREATE TABLE IF NOT EXISTS refresh_families (id TEXT PRIMARY KEY, device TEXT NOT NULL, created_at BIGINT NOT NULL, revoked_at BIGINT)",
        """
        CREATE TABLE IF NOT EXISTS refresh_tokens (
            hash TEXT PRIMARY KEY, family TEXT NOT NULL REFERENCES refresh_families (id), issued_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL, spent_at BIGINT, successor TEXT)
        """,
        "CREATE TABLE IF NOT EXISTS code_entry_failures (key TEXT NOT NULL, at BIGINT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS code_entry_failures_key ON code_entry_failures (key, at)",
        "CREATE TABLE IF NOT EXISTS password_links (token_hash TEXT PRIMARY KEY, owner BIGINT NOT NULL, expires_at BIGINT NOT NULL, used_at BIGINT)",
        "CREATE TABLE IF NOT EXISTS web_sessions (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at BIGINT)",
        // As SQLite's schema 4: who looked a code up and the wrong guesses against it; whose web
        // session a row is (its key stored hashed).
        "ALTER TABLE device_authorizations ADD COLUMN IF NOT EXISTS looked_up_by BIGINT",
        "ALTER TABLE device_authorizations ADD COLUMN IF NOT EXISTS wrong_decisions BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE web_sessions ADD COLUMN IF NOT EXISTS owner BIGINT",
        "ALTER TABLE owners ADD COLUMN IF NOT EXISTS time_zone TEXT",
        "ALTER TABLE owners ADD COLUMN IF NOT EXISTS language TEXT",
        "ALTER TABLE owners ADD COLUMN IF NOT EXISTS impact_mail BOOLEAN NOT NULL DEFAULT FALSE",
        "CREATE INDEX IF NOT EXISTS web_sessions_owner ON web_sessions (owner)",
        "CREATE TABLE IF NOT EXISTS device_guidance (device TEXT NOT NULL, at BIGINT NOT NULL, text TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS device_guidance_device ON device_guidance (device, at)",
        """
        CREATE TABLE IF NOT EXISTS device_trips (
            device TEXT NOT NULL, start_at BIGINT NOT NULL, end_at BIGINT NOT NULL, distance_m DOUBLE PRECISION NOT NULL,
            top_speed DOUBLE PRECISION NOT NULL, start_lat DOUBLE PRECISION NOT NULL, start_lon DOUBLE PRECISION NOT NULL,
            end_lat DOUBLE PRECISION NOT NULL, end_lon DOUBLE PRECISION NOT NULL, PRIMARY KEY (device, start_at))
        """,
        """
        CREATE TABLE IF NOT EXISTS device_track (
            device TEXT NOT NULL, at BIGINT NOT NULL, lat DOUBLE PRECISION NOT NULL, lon DOUBLE PRECISION NOT NULL, speed DOUBLE PRECISION NOT NULL)
        """,
        "CREATE INDEX IF NOT EXISTS device_track_device ON device_track (device, at)",
        "CREATE INDEX IF NOT EXISTS device_track_at ON device_track (at)",
        """
        CREATE TABLE IF NOT EXISTS payments (
            provider TEXT NOT NULL, payment_id TEXT NOT NULL, owner BIGINT NOT NULL, device TEXT NOT NULL, product TEXT NOT NULL,
            seconds BIGINT NOT NULL CHECK (seconds > 0), price TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
            settled_at BIGINT, PRIMARY KEY (provider, payment_id))
        """,
    ]
}

/// The usage ledger in PostgreSQL: each change one transaction (event and balance together); a
/// charge with a fence first checks, under a share lock on the lease row, that the session's lease
/// epoch is still the device's.
public final class PostgresLedger: UsageLedger {
    let client: PostgresClient
    let schema: PostgresSchema
    let probe: Probe
    let logger: Logger

    init(client: PostgresClient, schema: PostgresSchema, probe: Probe, logger: Logger) {
        self.client = client
        self.schema = schema
        self.probe = probe
        self.logger = logger
    }

    /// The client's settings for one connection of its own, and where it goes (without password).
    struct Probe: Sendable {
        var configuration: PostgresConnection.Configuration
        var target: String
    }

    /// Connects once, outside the client's pool, and runs `SELECT 1`: what a command calls first,
    /// so that a database it cannot reach is told at once and in words. (The pool retries for a
    /// minute instead, then fails its queries with a generic error.) Bounded by the connect timeout
    /// (10 s) when the host does not answer.
    public func checkReachable() async throws(LedgerError) {
        do {
            let connection = try await PostgresConnection.connect(configuration: probe.configuration, id: 0, logger: logger)
            do {
                try await connection.query("SELECT 1", logger: logger)
            } catch {
                try? await connection.close()
                throw error
            }
            try? await connection.close()
        } catch {
            throw .unavailable("cannot reach the usage ledger \(probe.target): \(Self.explain(error))")
        }
    }

    /// What went wrong, in PostgreSQL's or the network's words. `PSQLError`'s own description is
    /// a generic sentence on purpose (it may reach end users); this text is for the operator.
    /// Any other error is described as it describes itself.
    public static func explain(_ error: any Error) -> String {
        if let failed = error as? PostgresTransactionError,
           let inner = failed.closureError ?? failed.beginError ?? failed.commitError ?? failed.rollbackError {
            return explain(inner)
        }
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] {
            return "PostgreSQL says: \(message)" + (error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? "")
        }
        if let underlying = error.underlying { return explain(underlying) }
        return "PostgreSQL client: \(error.code)"
    }

    public func charge(_ charge: UsageCharge) async throws -> ChargeResult {
        try LedgerLimits.check(charge)
        return try await LedgerError.telling("usage ledger \(probe.target): charging \(charge.device) \(charge.stream) #\(charge.seq)") {
            try await schema.ensure()
            return try await charged(charge)
        }
    }

    private func charged(_ charge: UsageCharge) async throws -> ChargeResult {
        let logger = self.logger
        return try await PostgresUnit.transaction(client, logger: logger) { connection -> ChargeResult in
            if let fence = charge.fence {
                let rows = try await connection.query(
                    "SELECT epoch FROM session_leases WHERE device = \(fence.device) FOR SHARE", logger: logger)
                var current: Int64?
                for try await epoch in rows.decode(Int64.self) { current = epoch }
                guard current == fence.epoch else { throw LedgerError.fenced(device: fence.device, epoch: fence.epoch) }
            }
            let inserted = try await connection.query(
                """
                INSERT INTO usage_events (device, stream, seq, sha256, seconds)
                VALUES (\(charge.device), \(charge.stream), \(Int64(charge.seq)), \(charge.sha256), \(Int64(charge.seconds)))
                ON CONFLICT (device, stream, seq) DO NOTHING RETURNING seq
                """, logger: logger)
            var charged = false
            for try await _ in inserted.decode(Int64.self) { charged = true }
            if charged {
                try await connection.query(
                    """
                    INSERT INTO balances (device, spent, segments) VALUES (\(charge.device), \(Int64(charge.seconds)), 1)
                    ON CONFLICT (device) DO UPDATE SET spent = balances.spent + EXCLUDED.spent, segments = balances.segments + 1
                    """, logger: logger)
                return .charged(try await Self.balance(charge.device, on: connection, logger: logger))
            }
            var stored = ""
            let rows = try await connection.query(
                "SELECT sha256 FROM usage_events WHERE device = \(charge.device) AND stream = \(charge.stream) AND seq = \(Int64(charge.seq))",
                logger: logger)
            for try await sha in rows.decode(String.self) { stored = sha }
            return .alreadyCharged(try await Self.balance(charge.device, on: connection, logger: logger), sha256: stored)
        }
    }

    public func credit(device: String, seconds: Int, note: String) async throws -> DeviceBalance {
        try LedgerLimits.checkCredit(device: device, seconds: seconds)
        let logger = self.logger
        return try await LedgerError.telling("usage ledger \(probe.target): crediting \(device)") {
            try await schema.ensure()
            return try await PostgresUnit.transaction(client, logger: logger) { connection in
                try await connection.query(
                    "INSERT INTO credits (device, seconds, note) VALUES (\(device), \(Int64(seconds)), \(note))", logger: logger)
                try await connection.query(
                    """
                    INSERT INTO balances (device, credited) VALUES (\(device), \(Int64(seconds)))
                    ON CONFLICT (device) DO UPDATE SET credited = balances.credited + EXCLUDED.credited
                    """, logger: logger)
                return try await Self.balance(device, on: connection, logger: logger)
            }
        }
    }

    public func recordModelUsage(_ usage: ModelUsage) async throws {
        try LedgerLimits.check(usage)
        let logger = self.logger
        try await LedgerError.telling("usage ledger \(probe.target): recording tokens of \(usage.device)") {
            try await schema.ensure()
            try await PostgresUnit.transaction(client, logger: logger) { connection in
                let inserted = try await connection.query(
                    """
                    INSERT INTO model_usage (device, stream, seq, model, input_tokens, output_tokens)
                    VALUES (\(usage.device), \(usage.stream), \(Int64(usage.seq)), \(usage.model), \(Int64(usage.inputTokens)),
                            \(Int64(usage.outputTokens)))
                    ON CONFLICT (device, stream, seq) DO NOTHING RETURNING seq
                    """, logger: logger)
                var recorded = false
                for try await _ in inserted.decode(Int64.self) { recorded = true }
                guard recorded else { return }
                try await connection.query(
                    """
                    INSERT INTO balances (device, input_tokens, output_tokens)
                    VALUES (\(usage.device), \(Int64(usage.inputTokens)), \(Int64(usage.outputTokens)))
                    ON CONFLICT (device) DO UPDATE SET input_tokens = balances.input_tokens + EXCLUDED.input_tokens,
                        output_tokens = balances.output_tokens + EXCLUDED.output_tokens
                    """, logger: logger)
            }
        }
    }

    public func balance(device: String) async throws -> DeviceBalance {
        let logger = self.logger
        return try await LedgerError.telling("usage ledger \(probe.target): reading \(device)") {
            try await schema.ensure()
            return try await client.withConnection { connection in try await Self.balance(device, on: connection, logger: logger) }
        }
    }

    public func balances() async throws -> [DeviceBalance] {
        try await LedgerError.telling("usage ledger \(probe.target): reading the balances") {
            try await schema.ensure()
            var all: [DeviceBalance] = []
            let rows = try await client.query(
                "SELECT device, credited, spent, segments, input_tokens, output_tokens FROM balances ORDER BY device", logger: logger)
            for try await (device, credited, spent, segments, input, output) in rows.decode((String, Int64, Int64, Int64, Int64, Int64).self) {
                all.append(DeviceBalance(device: device, creditedSeconds: Int(credited), spentSeconds: Int(spent), segments: Int(segments),
                                         inputTokens: Int(input), outputTokens: Int(output)))
            }
            return all
        }
    }

    /// The client's pool ends with the service group that runs it.
    public func shutdown() async throws {}

    static func balance(_ device: String, on connection: PostgresConnection, logger: Logger) async throws -> DeviceBalance {
        let rows = try await connection.query(
            "SELECT credited, spent, segments, input_tokens, output_tokens FROM balances WHERE device = \(device)", logger: logger)
        var balance = DeviceBalance(device: device)
        for try await (credited, spent, segments, input, output) in rows.decode((Int64, Int64, Int64, Int64, Int64).self) {
            balance = DeviceBalance(device: device, creditedSeconds: Int(credited), spentSeconds: Int(spent), segments: Int(segments),
                                    inputTokens: Int(input), outputTokens: Int(output))
        }
        return balance
    }
}

/// Session leases in PostgreSQL: a row per device whose epoch grows with each new session, and a
/// `guidance_session_lease` notification on every change that each instance listens for, to close
/// its own session of that device when a newer one took it (within the notification's delivery,
/// well under a second on one network).
///
/// - Important: ``Listener`` (in ``PostgresStore/services``) must run for ``superseded`` to hear
///   of other instances. When its connection drops it connects again and compares this instance's
///   leases with their rows, so a lease taken while it was away is still told; until then, the
///   old session is stopped by its fence at its next charge.
public final class PostgresLeases: SessionLeases {
    /// This instance (a process, or one ``PostgresStore`` of it) in the lease rows and in its
    /// connections' `application_name`, "guidance-server INSTANCE".
    public let instance: String
    static let channel = "guidance_session_lease"

    let client: PostgresClient
    let schema: PostgresSchema
    let target: String
    let logger: Logger

    private struct State {
        /// This instance's session of each device, with its epoch.
        var held: [String: Change] = [:]
        /// The newest lease heard of for each device, here or elsewhere: an acquire whose commit
        /// is overtaken by a newer one's notification learns from it that it lost at once.
        var newest: [String: Change] = [:]
    }

    private let state = Mutex(State())
    public let superseded: AsyncStream<SupersededSession>
    private let continuation: AsyncStream<SupersededSession>.Continuation

    init(client: PostgresClient, schema: PostgresSchema, instance: String, target: String, logger: Logger) {
        self.client = client
        self.instance = instance
        self.schema = schema
        self.target = target
        self.logger = logger
        (superseded, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    deinit { continuation.finish() }

    struct Change: Codable, Sendable {
        var device: String
        var session: String
        var epoch: Int64
    }

    public func acquire(device: String, session: String) async throws -> Int64 {
        let logger = self.logger, instance = self.instance
        let epoch = try await LedgerError.telling("session leases \(target): acquiring \(device)") {
            try await schema.ensure()
            return try await PostgresUnit.transaction(client, logger: logger) { connection -> Int64 in
                let rows = try await connection.query(
                    """
                    INSERT INTO session_leases (device, instance, session, epoch) VALUES (\(device), \(instance), \(session), 1)
                    ON CONFLICT (device) DO UPDATE SET instance = EXCLUDED.instance, session = EXCLUDED.session,
                        epoch = session_leases.epoch + 1, acquired_at = now()
                    RETURNING epoch
                    """, logger: logger)
                var epoch: Int64 = 0
                for try await value in rows.decode(Int64.self) { epoch = value }
                let payload = String(decoding: try JSONEncoder().encode(Change(device: device, session: session, epoch: epoch)), as: UTF8.self)
                // Delivered to every listener when the transaction commits.
                try await connection.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: logger)
                return epoch
            }
        }
        let mine = Change(device: device, session: session, epoch: epoch)
        let lost: [SupersededSession] = state.withLock { state in
            var lost: [SupersededSession] = []
            if let previous = state.held[device], previous.session != session, previous.epoch < epoch {
                lost.append(SupersededSession(device: device, session: previous.session, byEpoch: epoch))
            }
            if let newer = state.newest[device], newer.epoch > epoch {
                // Taken again (elsewhere) before this acquire got here: lost already.
                state.held[device] = nil
                lost.append(SupersededSession(device: device, session: session, byEpoch: newer.epoch))
            } else {
                state.held[device] = mine
                state.newest[device] = mine
            }
            return lost
        }
        for session in lost { continuation.yield(session) }
        return epoch
    }

    public func release(device: String, session: String, epoch: Int64) async throws {
        state.withLock { state in
            if let held = state.held[device], held.session == session, held.epoch == epoch { state.held[device] = nil }
        }
        let logger = self.logger
        try await LedgerError.telling("session leases \(target): releasing \(device)") {
            try await schema.ensure()
            // The row stays, with no session: its epoch is the device's newest, and the next acquire
            // must go above it (every instance remembers it as the newest; starting again at 1 would
            // make the next sessions look older than a lease that has ended).
            try await client.query(
                """
                UPDATE session_leases SET session = '', instance = ''
                WHERE device = \(device) AND session = \(session) AND epoch = \(epoch)
                """, logger: logger)
        }
    }

    /// A notification: a lease changed somewhere.
    func changed(_ payload: String) {
        guard let change = try? JSONDecoder().decode(Change.self, from: Data(payload.utf8)) else {
            logger.warning("ignoring an unreadable lease notification")
            return
        }
        changed(change)
    }

    /// A lease changed somewhere: this instance's older session of that device is closed.
    func changed(_ change: Change) {
        let lost: String? = state.withLock { state in
            if change.epoch > state.newest[change.device]?.epoch ?? 0 { state.newest[change.device] = change }
            guard let held = state.held[change.device], held.session != change.session, held.epoch < change.epoch else { return nil }
            state.held[change.device] = nil
            return held.session
        }
        if let lost {
            continuation.yield(SupersededSession(device: change.device, session: lost, byEpoch: change.epoch))
        }
    }

    /// Compares this instance's leases with their rows, for changes whose notifications were lost
    /// with a listening connection. (A row gone altogether is left to the fence.)
    func reconcile() async throws {
        let devices = state.withLock { Array($0.held.keys) }
        guard !devices.isEmpty else { return }
        let rows = try await client.query(
            "SELECT device, session, epoch FROM session_leases WHERE device = ANY(\(devices))", logger: logger)
        for try await (device, session, epoch) in rows.decode((String, String, Int64).self) {
            changed(Change(device: device, session: session, epoch: epoch))
        }
    }

    /// Listens for lease changes as long as the server runs, connecting again (after 1 s) whenever
    /// its connection ends; each time it listens, it first catches up with ``reconcile()``.
    struct Listener: Service {
        let leases: PostgresLeases

        func run() async throws {
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    try await leases.client.withConnection { connection in
                        try await connection.listen(on: PostgresLeases.channel) { notifications in
                            try await leases.reconcile()
                            for try await notification in notifications.cancelOnGracefulShutdown() {
                                leases.changed(notification.payload)
                            }
                        }
                    }
                    if Task.isCancelled || Task.isShuttingDownGracefully { return }
                    leases.logger.warning("lease notifications \(leases.target) ended; listening again in 1 s")
                } catch {
                    if Task.isCancelled || Task.isShuttingDownGracefully { return }
                    leases.logger.warning("lease notifications \(leases.target): \(PostgresLedger.explain(error)); listening again in 1 s")
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}

extension LedgerError {
    /// Runs `body`, telling its failure as a ledger error: a ``LedgerError`` as itself, also from
    /// inside a transaction (postgres-nio wraps what a transaction's closure throws in a
    /// `PostgresTransactionError`, which would hide ``fenced(device:epoch:)``); anything else as
    /// ``unavailable(_:)``, `doing` and PostgreSQL's own words.
    static func telling<T>(_ doing: @autoclosure () -> String, _ body: () async throws -> T) async throws(LedgerError) -> T {
        do {
            return try await body()
        } catch let error as LedgerError {
            throw error
        } catch let failed as PostgresTransactionError {
            if let inner = failed.closureError as? LedgerError { throw inner }
            throw .unavailable("\(doing()): \(PostgresLedger.explain(failed))")
        } catch {
            throw .unavailable("\(doing()): \(PostgresLedger.explain(error))")
        }
    }
}

/// Runs `body` with `services` running beside it (a command that needs the PostgreSQL client's
/// pool, say); the services are cancelled when it returns.
public func withServices<T: Sendable>(_ services: [any Service], _ body: @Sendable () async throws -> T) async throws -> T {
    guard !services.isEmpty else { return try await body() }
    return try await withThrowingTaskGroup(of: T?.self) { group in
        for service in services { group.addTask { try await service.run(); return nil } }
        defer { group.cancelAll() }
        return try await body()
    }
}

/// A PostgreSQL transaction as one unit of work: run ``uninterrupted(_:)``, so a caller cancelled
/// half way (a session that ended) cannot leave it open on a pooled connection; and a connection
/// whose transaction did not end cleanly (its `ROLLBACK` or `COMMIT` failed) is closed instead of
/// going back to the pool, where the next caller's statements would join the open transaction.
enum PostgresUnit {
    static func transaction<T: Sendable>(_ client: PostgresClient, logger: Logger,
                                         _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await uninterrupted {
            try await client.withConnection { connection in
                do {
                    return try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
                } catch let error as PostgresTransactionError where error.rollbackError != nil || error.commitError != nil {
                    logger.error("a PostgreSQL transaction did not end cleanly; its connection is closed, not reused: \(String(reflecting: error))")
                    try? await connection.close()
                    throw error
                }
            }
        }
    }
}
