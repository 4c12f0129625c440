import ArgumentParser
import ConfigSupport
import Foundation
import GuidanceServer
import Hummingbird
import Logging

/// `guidance-server`: the reference server the agent streams to.
@main
struct GuidanceServerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "guidance-server",
        abstract: "Reference guidance server: receives segments over WebSocket and answers with guidance.")

    @Option(help: "YAML config file (see device-config/server.yaml).")
    var config: String?

    @Option(help: "Port to listen on (overrides server.port; 0 picks a free one).")
    var port: Int?

    func run() async throws {
        let config: ServerConfig
        do {
            config = try await ServerConfig.load(file: self.config, overrides: port.map { ["server.port": String($0)] } ?? [:])
        } catch {
            FileHandle.standardError.write(Data("guidance-server: \(error)\n".utf8))
            throw ExitCode(78)
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = config.log.level
            return handler
        }
        let logger = Logger(label: "guidance-server")
        let app: any ApplicationProtocol
        do {
            app = try config.makeServer(logger: logger).application { port in
                logger.notice("listening on \(config.server.host):\(port)\(config.server.usesTLS ? " (TLS)" : "")")
            }
        } catch {
            FileHandle.standardError.write(Data("guidance-server: \(error)\n".utf8))
            // Tokens, script and TLS files are configuration too: EX_CONFIG.
            throw ExitCode(78)
        }
        try await app.runService()
    }
}
