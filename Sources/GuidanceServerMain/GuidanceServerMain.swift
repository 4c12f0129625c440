import ArgumentParser
import ConfigSupport
import Foundation
import GuidanceProtocol
import GuidanceServer
import Hummingbird
import Logging
import ServiceLifecycle

/// `guidance-server`: the reference server the agent streams to, and the operator's commands on
/// its usage ledger.
@main
struct GuidanceServerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "guidance-server",
        abstract: "Reference guidance server: receives segments over WebSocket and answers with guidance.",
        version: ReleaseVersion.current,
        subcommands: [Serve.self, Credit.self, Usage.self, Analyze.self, TokenCommand.self],
        defaultSubcommand: Serve.self)
}

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
    func openLedger(_ config: ServerConfig, logger: Logger) async throws -> (ledger: any UsageLedger, leases: any SessionLeases, services: [any Service]) {
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

func fail(_ message: String, exit code: Int32) -> Never {
    FileHandle.standardError.write(Data("guidance-server: \(message)\n".utf8))
    Foundation.exit(code)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the server (the default command).")

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
        // Configuration first (exit 78), before the ledger is opened or created.
        do { _ = try DeviceTokens(file: config.server.tokensFile) } catch { fail("\(error)", exit: 78) }
        let (ledger, leases, services) = try await options.openLedger(config, logger: logger)
        let app: any ApplicationProtocol
        do {
            app = try config.makeServer(logger: logger, ledger: ledger, leases: leases, services: services).application { port in
                logger.notice("listening on \(config.server.host):\(port)\(config.server.usesTLS ? " (TLS)" : "")")
            }
        } catch {
            // Tokens, script and TLS files are configuration too: EX_CONFIG.
            fail("\(error)", exit: 78)
        }
        try await app.runService()
        try? await ledger.shutdown()
    }
}

struct Credit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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

struct Usage: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print what each device (or one) was credited, spent and has left.")

    @OptionGroup var options: ConfigOptions

    @Argument(help: "Only this device.")
    var device: String?

    @Flag(help: "One JSON array of {device, creditedSeconds, spentSeconds, segments, remainingSeconds (null: unlimited), inputTokens, outputTokens}.")
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

/// The configured analyzer on recorded segments, with no device and no network but the model
/// service's: to try an analyzer (or a model) on footage before cars use it.
struct Analyze: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the configured analyzer on segment files and print one JSON line each: the guidance a device would get, and the CPU and time it took.")

    @OptionGroup var options: ConfigOptions

    @Option(help: "The device language (BCP 47) the guidance is asked in.")
    var locale = "en-US"

    @Option(help: "Frames per segment, as a device's segment header says (5 s at 10 fps: 50).")
    var frames = 50

    @Argument(help: "MP4 segments, such as those the agent records.")
    var files: [String]

    func run() async throws {
        let config = try await options.load()
        var logger = Logger(label: "guidance-server")
        logger.logLevel = config.log.level
        let ledger = SQLiteLedger(path: ":memory:", logger: logger)
        let analyzer: any SegmentAnalyzer
        do { analyzer = try config.makeAnalyzer(ledger: ledger, logger: logger) } catch { fail("\(error)", exit: 78) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var failed = false
        for (seq, file) in files.enumerated() {
            guard let data = FileManager.default.contents(atPath: file) else {
                FileHandle.standardError.write(Data("\(file): cannot read it\n".utf8))
                failed = true
                continue
            }
            let header = ClientMessage.SegmentHeader(
                seq: seq, capturedAt: "", durationMs: frames * 100, frames: frames, bytes: data.count, sha256: "", chunks: 1, data: nil)
            let cpu = Self.cpuSeconds(), clock = ContinuousClock.now
            do {
                let guidance = try await analyzer.analyze(ReceivedSegment(device: "analyze", stream: "analyze", locale: locale, header: header, data: data))
                let line = Line(file: file, clear: guidance?.clear, text: guidance?.text, lang: guidance?.lang, priority: guidance?.priority.rawValue,
                                cpuMs: Int(((Self.cpuSeconds() - cpu) * 1000).rounded()),
                                wallMs: Int((ContinuousClock.now - clock) / .milliseconds(1)))
                print(String(decoding: try encoder.encode(line), as: UTF8.self))
            } catch {
                FileHandle.standardError.write(Data("\(file): \(error)\n".utf8))
                failed = true
            }
        }
        try? await ledger.shutdown()
        if failed { throw ExitCode(65) }
    }

    struct Line: Encodable {
        var file: String
        var clear: Bool?
        var text: String?
        var lang: String?
        var priority: String?
        var cpuMs: Int
        var wallMs: Int
    }

    /// This process's user + system CPU time (the analyzer's threads included).
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }
}

/// One device's line in `usage` and `credit`.
struct UsageReport: Encodable {
    var device: String
    var creditedSeconds: Int
    var spentSeconds: Int
    var segments: Int
    var remainingSeconds: Int?
    /// Tokens hosted models spent on the device's segments.
    var inputTokens: Int
    var outputTokens: Int

    init(_ balance: DeviceBalance, allowance: Int?) {
        device = balance.device
        creditedSeconds = balance.creditedSeconds
        spentSeconds = balance.spentSeconds
        segments = balance.segments
        remainingSeconds = balance.remaining(allowance: allowance)
        inputTokens = balance.inputTokens
        outputTokens = balance.outputTokens
    }

    func encode(to encoder: any Encoder) throws {
        enum Keys: String, CodingKey { case device, creditedSeconds, spentSeconds, segments, remainingSeconds, inputTokens, outputTokens }
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(device, forKey: .device)
        try container.encode(creditedSeconds, forKey: .creditedSeconds)
        try container.encode(spentSeconds, forKey: .spentSeconds)
        try container.encode(segments, forKey: .segments)
        // null is unlimited, written out.
        try container.encode(remainingSeconds, forKey: .remainingSeconds)
        try container.encode(inputTokens, forKey: .inputTokens)
        try container.encode(outputTokens, forKey: .outputTokens)
    }

    /// The column titles above ``line``s.
    static let header = columns("device", "credited", "spent", "segments", "remaining")

    var line: String {
        Self.columns(device, String(creditedSeconds), String(spentSeconds), String(segments), remainingSeconds.map(String.init) ?? "unlimited")
    }

    /// Device left-aligned, numbers right-aligned. (Not `String(format: "%d")`, which reads 32 bits
    /// of a 64-bit Int on Linux: a balance past 2^31 printed wrong.)
    static func columns(_ device: String, _ credited: String, _ spent: String, _ segments: String, _ remaining: String) -> String {
        func right(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
        let padded = device + String(repeating: " ", count: max(0, 18 - device.count))
        return "\(padded) \(right(credited, 12)) \(right(spent, 10)) \(right(segments, 9))  \(remaining)"
    }
}

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Give a device its token, take it away, or list the devices that have one (server.tokensFile).",
        discussion: """
            The tokens file is written whole (mode 0600) and renamed into place; a running server \
            reads it again at its next connection, so no restart is needed.
            """,
        subcommands: [Add.self, Remove.self, List.self])

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
