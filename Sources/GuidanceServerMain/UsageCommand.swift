import ArgumentParser
import Foundation
import GuidanceServer

struct UsageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "usage", abstract: "Print what each device (or one) was credited, spent and has left.")

    @OptionGroup var options: ConfigOptions

    @Argument(help: "Only this device.")
    var device: String?

    @Flag(
        help:
            "One JSON array of {device, creditedSeconds, spentSeconds, segments, remainingSeconds (null: unlimited), inputTokens, outputTokens}."
    )
    var json = false

    func run() async throws {
        let config = try await options.load()
        let device = device
        let balances = try await options.withLedger(config) { ledger in
            if let device { [try await ledger.balance(device: device)] } else { try await ledger.balances() }
        }
        let reports = balances.map { UsageReport($0, allowance: config.usage.remainingSeconds) }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(reports), as: UTF8.self))
        } else {
            print(UsageReport.header)
            for report in reports { print(report.line) }
        }
    }
}
