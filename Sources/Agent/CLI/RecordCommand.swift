import ArgumentParser
import ConfigSupport
import FFmpegLog
import Foundation
import HAL
import Logging

struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record segments to a folder and print one JSON line of metadata per segment."
    )

    @Option(help: "YAML config file (see device-config/).")
    var config: String?

    @Option(help: "Recording folder (overrides recording.dir).")
    var out: String?

    @Option(help: "Stop after this many segments.")
    var segments: Int?

    @Option(help: "v4l2[:DEVICE], test-pattern or file:PATH (overrides camera.source).")
    var source: String?

    @Flag(help: "Feed test-pattern and file sources as fast as possible (camera.pace: fast).")
    var fast = false

    @Option(
        name: .customLong("set"),
        help: ArgumentHelp(
            "Set a config key for this run, over the file and the environment (repeatable).", valueName: "KEY=VALUE"))
    var settings: [String] = []

    func run() async throws {
        HeapPolicy.mapBuffers(from: 256 << 10)
        do {
            try await record()
        } catch let exit as ExitCode {
            throw exit
        } catch {
            throw ExitStatus.report(error)
        }
    }

    private func record() async throws {
        if let segments, segments < 1 {
            throw ConfigError.invalidOption("--segments", "\(segments)", "a whole number of segments, 1 or more")
        }
        let overrides = try overrides()
        let config = try await AgentConfig.load(file: self.config, overrides: overrides)
        let logLevel = Reloadable(config.log.level)
        LoggingSystem.bootstrap { ReloadableLevelLogHandler(label: $0, level: logLevel) }
        FFmpegLog.route()
        ALSALog.route()
        let logger = Logger(label: "dashcam-agent")
        let system = try await AgentSystem(config: config, segments: segments, logLevel: logLevel, logger: logger) {
            [file = self.config] in try await AgentConfig.load(file: file, overrides: overrides)
        }
        try await system.run()
    }

    /// Flags that override config keys (CLI > environment > file > defaults).
    private func overrides() throws -> [String: String] {
        var values: [String: String] = [:]
        for setting in settings {
            guard let equals = setting.firstIndex(of: "="), equals != setting.startIndex else {
                throw ConfigError.invalidOption("--set", setting, "KEY=VALUE with a key from device-config/README.md, e.g. camera.fps=15")
            }
            values[String(setting[..<equals])] = String(setting[setting.index(after: equals)...])
        }
        if let out { values["recording.dir"] = out }
        if fast { values["camera.pace"] = "fast" }
        if let source {
            let (kind, argument) = source.split(separator: ":", maxSplits: 1).map(String.init).pair
            values["camera.source"] = kind
            switch kind {
            case "v4l2": if let argument { values["camera.device"] = argument }
            case "file":
                guard let argument else {
                    throw ConfigError.invalidOption("--source", source, "v4l2[:DEVICE], test-pattern or file:PATH")
                }
                values["camera.file"] = argument
            case "test-pattern": break
            default: throw ConfigError.invalidOption("--source", source, "v4l2[:DEVICE], test-pattern or file:PATH")
            }
        }
        return values
    }
}

/// `--source`'s `KIND[:ARGUMENT]`, split.
extension Array where Element == String {
    fileprivate var pair: (String, String?) { (self.first ?? "", self.count > 1 ? self[1] : nil) }
}
