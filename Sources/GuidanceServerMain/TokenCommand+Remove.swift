import ArgumentParser
import GuidanceServer

extension TokenCommand {
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove DEVICE's token: it can no longer open a session.")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "Device id.")
        var device: String

        func run() async throws {
            let file = try await options.load().server.tokensFile
            do { try TokensFileEditor.remove(device: device, file: file) } catch { fail("\(error)", exit: 65) }
        }
    }
}
