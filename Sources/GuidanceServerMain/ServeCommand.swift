import ArgumentParser
import ConfigSupport
import FFmpegLog
import GuidanceServer
import Hummingbird
import Logging
import ServiceLifecycle
import UnixSignals

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Run the server (the default command).")

    @OptionGroup var options: ConfigOptions

    @Option(help: "Port to listen on (overrides server.port; 0 picks a free one).")
    var port: Int?

    func run() async throws {
        let config = try await options.load(overrides: port.map { ["server.port": String($0)] } ?? [:])
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = config.log.level
            return handler
        }
        let logger = Logger(label: "guidance-server")
        FFmpegLog.route()
        // Configuration first (exit 78), before the ledger is opened or created.
        let tokens: StaticDeviceTokens
        do { tokens = try StaticDeviceTokens(file: config.server.tokensFile, logger: logger) } catch { fail("\(error)", exit: 78) }
        let (ledger, leases, services) = try await options.openLedger(config, logger: logger)
        let pairing: Pairing?
        do { pairing = try await config.openPairing(logger: logger, ledger: ledger) } catch let error as ConfigError {
            fail("\(error)", exit: 78)
        }
        let app: any ApplicationProtocol
        let server: StreamServer
        let marker = RunMarker()
        do {
            server = try config.makeServer(
                tokens: tokens, logger: logger, ledger: ledger, leases: leases, services: services, pairing: pairing)
            app = try ServerApplication(stream: server).build { port in
                // Before "listening": what happened to the last run is the first thing its log says.
                marker.started(port: port, logger: logger)
                logger.notice("listening on \(config.server.host):\(port)\(config.server.usesTLS ? " (TLS)" : "")")
            }
        } catch {
            // Tokens, script and TLS files are configuration too: EX_CONFIG.
            fail("\(error)", exit: 78)
        }
        // A graceful shutdown goes through the services last to first: the sessions are told the
        // server is restarting (1012) before the listener closes.
        try await ServiceGroup(
            configuration: .init(
                services: [app, server.restartNotice], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        ).run()
        try? await pairing?.store.shutdown()
        try? await ledger.shutdown()
        marker.stopped()
    }
}
