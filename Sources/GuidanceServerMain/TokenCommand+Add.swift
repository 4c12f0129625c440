import ArgumentParser
import GuidanceServer

extension TokenCommand {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a token for DEVICE and print it, once: it goes in the device's uplink.tokenFile (mode 0600).")
        @OptionGroup var options: ConfigOptions
        @Argument(help: "Device id (letters, digits, '-', '_', '.'): the id the ledger and the logs use.")
        var device: String
        @Flag(help: "Give a device that has a token a new one; the old one stops working.")
        var replace = false

        func run() async throws {
            let file = try await options.load().server.tokensFile
            do {
                print(try TokensFileEditor.add(device: device, file: file, replace: replace))
            } catch {
                fail("\(error)", exit: 65)
            }
        }
    }
}
