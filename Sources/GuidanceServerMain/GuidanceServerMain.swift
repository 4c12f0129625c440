import ArgumentParser
import Foundation
import GuidanceProtocol

/// `guidance-server`: the reference server the agent streams to, and the operator's commands on
/// its usage ledger.
@main
struct GuidanceServerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "guidance-server",
        abstract: "Reference guidance server: receives segments over WebSocket and answers with guidance.",
        version: ReleaseVersion.current,
        subcommands: [ServeCommand.self, CreditCommand.self, UsageCommand.self, AnalyzeCommand.self, TokenCommand.self, OwnerCommand.self],
        defaultSubcommand: ServeCommand.self)
}

/// Tells `message` on standard error and exits with `code`.
func fail(_ message: String, exit code: Int32) -> Never {
    FileHandle.standardError.write(Data("guidance-server: \(message)\n".utf8))
    Foundation.exit(code)
}
