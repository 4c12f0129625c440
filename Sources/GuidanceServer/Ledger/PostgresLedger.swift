import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

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
            let inner = failed.closureError ?? failed.beginError ?? failed.commitError ?? failed.rollbackError
        {
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
            for try await (device, credited, spent, segments, input, output) in rows.decode(
                (String, Int64, Int64, Int64, Int64, Int64).self)
            {
                all.append(
                    DeviceBalance(
                        device: device, creditedSeconds: Int(credited), spentSeconds: Int(spent), segments: Int(segments),
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
            balance = DeviceBalance(
                device: device, creditedSeconds: Int(credited), spentSeconds: Int(spent), segments: Int(segments),
                inputTokens: Int(input), outputTokens: Int(output))
        }
        return balance
    }
}
