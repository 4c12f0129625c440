import Foundation

/// What SoX says about a sound file: claims about audio are checked by a tool that is not ours.
struct SoxStat {
    var seconds: Double
    var maximumAmplitude: Double
    var rmsAmplitude: Double
    var sampleRate: Int

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `sox FILE -n stat` and `soxi -r FILE`.
    init(_ path: String) throws {
        let stat = try Self.run(["sox", path, "-n", "stat"]).stderr
        func field(_ name: String) throws -> Double {
            let line = stat.split(separator: "\n").first { $0.hasPrefix(name) }
            guard let line, let value = line.split(separator: ":").last.flatMap({ Double($0.trimmingCharacters(in: .whitespaces)) })
            else { throw Failure(description: "sox stat of \(path) has no '\(name)':\n\(stat)") }
            return value
        }
        seconds = try field("Length (seconds)")
        maximumAmplitude = try field("Maximum amplitude")
        rmsAmplitude = try field("RMS     amplitude")
        let rate = try Self.run(["soxi", "-r", path]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let sampleRate = Int(rate) else { throw Failure(description: "soxi -r \(path) said '\(rate)'") }
        self.sampleRate = sampleRate
    }

    private static func run(_ arguments: [String]) throws -> (stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let result = (String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(arguments.joined(separator: " ")) exited with \(process.terminationStatus): \(result.1)")
        }
        return result
    }
}

/// A fresh folder under the temporary directory, removed by `remove()`.
struct TemporaryFolder {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("speech-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    var files: [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }

    func bytes(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/" + name)))
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}
