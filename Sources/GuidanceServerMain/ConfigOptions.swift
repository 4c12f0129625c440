import ArgumentParser
import ConfigSupport
import GuidanceServer
import Logging
import ServiceLifecycle

/// What every command reads: the config file.
struct ConfigOptions: ParsableArguments {
    @Option(help: "YAML config file (see device-config/server.yaml).")
    var config: String?

    /// The configuration, or exit 78 with the problem.
    func load(overrides: [String: String] = [:]) async throws -> ServerConfig {
        do {
            return try await ServerConfig.load(file: config, overrides: overrides)
        } catch {
            fail("\(error)", exit: 78)
        }
    }

    /// The ledger the configuration names, or exit 69 (EX_UNAVAILABLE) when it cannot be reached.
    func openLedger(_ config: ServerConfig, logger: Logger) async throws -> (
        ledger: any UsageLedger, leases: any SessionLeases, services: [any Service]
    ) {
        do {
            let opened = try await config.openLedger(logger: logger)
            // A database that cannot be reached is told at start, not a minute into the first charge.
            if let postgres = opened.ledger as? PostgresLedger { try await postgres.checkReachable() }
            return opened
        } catch let error as ConfigError {
            fail("\(error)", exit: 78)
        } catch {
            fail("\(error)", exit: 69)
        }
    }

    /// An operator command's work on the configured ledger, then the ledger closed. Exits 78 for
    /// the configuration, 69 (EX_UNAVAILABLE) when the ledger cannot be opened, reached or used,
    /// 64 (EX_USAGE) for a value the ledger refuses.
    func withLedger<T: Sendable>(_ config: ServerConfig, _ body: @Sendable (any UsageLedger) async throws -> T) async throws -> T {
        var logger = Logger(label: "guidance-server")
        // The PostgreSQL client's retries and its warning that a query came before its pool ran
        // (it waits for it) are noise for a command, whose error is told once, below; unless the
        // configuration asks for debugging.
        logger.logLevel = config.log.level < .info ? config.log.level : .error
        let ledger: any UsageLedger, services: [any Service]
        do {
            (ledger, services) = try await config.openUsageLedger(logger: logger)
        } catch let error as ConfigError {
            fail("\(error)", exit: 78)
        } catch {
            fail("\(error)", exit: 69)
        }
        if let postgres = ledger as? PostgresLedger {
            do { try await postgres.checkReachable() } catch { fail("\(error)", exit: 69) }
        }
        do {
            let result = try await withServices(services) { try await body(ledger) }
            try? await ledger.shutdown()
            return result
        } catch let error as LedgerError {
            if case .invalid = error { fail("\(error)", exit: 64) }
            fail("\(error)", exit: 69)
        } catch {
            fail("the usage ledger failed: \(PostgresLedger.explain(error))", exit: 69)
        }
    }
}
