import ArgumentParser
import FFmpegLog
import Foundation
import GuidanceProtocol
import GuidanceServer
import Logging

/// The configured analyzer on recorded segments, with no device and no network but the model
/// service's: to try an analyzer (or a model) on footage before cars use it.
struct AnalyzeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "analyze",
        abstract:
            "Run the configured analyzer on segment files and print one JSON line each: the guidance a device would get, and the CPU and time it took."
    )

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
        FFmpegLog.route(level: config.log.level)
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
                seq: seq, capturedAt: "", durationMs: frames * 100, frames: frames, bytes: data.count, sha256: "", chunks: 1)
            let cpu = Self.cpuSeconds(), clock = ContinuousClock.now
            do {
                let guidance = try await analyzer.analyze(
                    ReceivedSegment(device: "analyze", stream: "analyze", locale: locale, header: header, data: data))
                let line = Line(
                    file: file, clear: guidance?.clear, text: guidance?.text, lang: guidance?.lang, priority: guidance?.priority.rawValue,
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
