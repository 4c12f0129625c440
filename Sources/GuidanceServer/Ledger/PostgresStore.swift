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
        """
    ]
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
        for service in services {
            group.addTask {
                try await service.run(); return nil
            }
        }
        defer { group.cancelAll() }
        return try await body()
    }
}

/// A PostgreSQL transaction as one unit of work: run ``uninterrupted(_:)``, so a caller cancelled
/// half way (a session that ended) cannot leave it open on a pooled connection; and a connection
/// whose transaction did not end cleanly (its `ROLLBACK` or `COMMIT` failed) is closed instead of
/// going back to the pool, where the next caller's statements would join the open transaction.
enum PostgresUnit {
    static func transaction<T: Sendable>(
        _ client: PostgresClient, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await uninterrupted {
            try await client.withConnection { connection in
                do {
                    return try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
                } catch let error as PostgresTransactionError where error.rollbackError != nil || error.commitError != nil {
                    logger.error(
                        "a PostgreSQL transaction did not end cleanly; its connection is closed, not reused: \(String(reflecting: error))")
                    try? await connection.close()
                    throw error
                }
            }
        }
    }
}
