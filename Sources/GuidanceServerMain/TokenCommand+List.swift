import ArgumentParser
import GuidanceServer

extension TokenCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the devices that have a token (never the tokens).")
        @OptionGroup var options: ConfigOptions

        func run() async throws {
            let file = try await options.load().server.tokensFile
            do {
                for device in try TokensFileEditor.devices(file: file) { print(device) }
            } catch {
                fail("\(error)", exit: 65)
            }
        }
    }
}
