import ArgumentParser
import GuidanceServer

struct CreditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "credit",
        abstract: "Add seconds of guidance to a device's balance (what a purchase buys), then print it.")

    @OptionGroup var options: ConfigOptions

    @Argument(help: "Device id, as in the tokens file.")
    var device: String

    @Argument(help: "Seconds to add, 1 or more.")
    var seconds: Int

    @Option(help: "Why (an order number, say); kept with the credit.")
    var note: String = ""

    func validate() throws {
        guard !device.isEmpty else { throw ValidationError("DEVICE must not be empty") }
        guard seconds >= 1 else { throw ValidationError("SECONDS must be 1 or more, not \(seconds)") }
    }

    func run() async throws {
        let config = try await options.load()
        let (device, seconds, note) = (device, seconds, note)
        let balance = try await options.withLedger(config) { ledger in
            try await ledger.credit(device: device, seconds: seconds, note: note)
        }
        print(UsageReport(balance, allowance: config.usage.remainingSeconds).line)
    }
}
