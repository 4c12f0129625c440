import Agent
import Foundation
import TestSupport
import Testing

/// Runs the real `dashcam-agent` binary, as a user would, and checks its segments with ffprobe.
@Suite(.serialized) struct RecordCommandTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    /// The agent binary sits beside the test bundle in the build folder.
    static let agent = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("dashcam-agent").path

    struct Run {
        var status: Int32
        var lines: [[String: Any]]
        var stderr: String
        var folder: URL
    }

    /// `environment` adds variables (`DASHCAM_…` set config keys).
    func record(_ arguments: [String], config: String = "device-config/demo.yaml", environment: [String: String] = [:]) async throws -> Run
    {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("record-\(UUID().uuidString)")
        let result = try await Command.executeAsync(
            Self.agent, ["record", "--config", Self.repo.appendingPathComponent(config).path, "--out", folder.path] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        let lines = result.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        return Run(status: result.status, lines: lines, stderr: result.stderr, folder: folder)
    }

    /// `durationMs`, the line's, when frames may have been dropped between the first and the last
    /// (a paced camera on a busy machine): the file's length is then more than its frames'.
    func checkSegment(_ file: URL, frames: Int, durationMs: Int? = nil, fps: Int = 10) throws {
        let probed = try FFprobe.probe(file)
        #expect(probed.codec == "hevc", "\(file.lastPathComponent)")
        #expect(probed.tag == "hvc1")
        #expect(probed.frames == frames, "\(file.lastPathComponent)")
        let length = durationMs.map { Double($0) / 1000 } ?? Double(frames) / Double(fps)
        #expect(abs(probed.duration - length) <= 1.0 / Double(fps), "\(probed.duration) s, \(length) s")
        #expect(probed.keyFrames.first == true && probed.keyframeCount == 1)
        #expect(probed.startsWithIDR)
        #expect(probed.moovBeforeMdat)
    }

    @Test func testPatternRecordsConsecutiveFiveSecondSegments() async throws {
        let run = try await record(["--source", "test-pattern", "--fast", "--segments", "3"])
        defer { try? FileManager.default.removeItem(at: run.folder) }
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.lines.count == 3)
        // The segments, and the log of the order they were recorded in; no temporary file.
        let stored = files(under: run.folder).filter { $0 != ".recording-order" }
        #expect(stored.count == 3 && stored.allSatisfy { $0.hasSuffix(".mp4") }, "no temporary files left: \(stored)")
        for (index, line) in run.lines.enumerated() {
            #expect(line["seq"] as? Int == index)
            #expect(line["frames"] as? Int == 50 && line["droppedFrames"] as? Int == 0)
            #expect(line["complete"] as? Bool == true && line["endReason"] as? String == "complete")
            #expect(line["durationMs"] as? Int == 5000)
            #expect(line["encoder"] as? String == "libx265")
            let name = try #require(line["file"] as? String)
            #expect(stored.contains(name))
            // One folder per UTC day: the date of the capture time (RFC 3339 UTC).
            let day = try #require((line["capturedAt"] as? String)?.prefix(10))
            #expect(name.hasPrefix("\(day)/"), "\(name)")
            let file = run.folder.appendingPathComponent(name)
            try checkSegment(file, frames: 50)
            let bytes = try Data(contentsOf: file)
            #expect(line["bytes"] as? Int == bytes.count)
            let sha = try Command.run("sha256sum", [file.path]).stdout.prefix(64)
            #expect(line["sha256"] as? String == String(sha))
        }
        // No frame lost between segments: each starts exactly where the previous one ended.
        let starts = run.lines.compactMap { $0["captureStartMonotonicNs"] as? Int }
        #expect(zip(starts, starts.dropFirst()).allSatisfy { $1 - $0 == 5_000_000_000 })
        let stamps = run.lines.compactMap { $0["capturedAt"] as? String }
        #expect(stamps.count == 3 && stamps.allSatisfy { $0.hasSuffix("Z") && $0.contains(".") })
    }

    @Test func aVideoFileIsReplayedIntoSegmentsAndItsTailIsKept() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("input-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let input = folder.appendingPathComponent("drive.mkv")
        // 12 s at 10 fps, 352x288, in another codec: decoded and scaled to the configured size.
        try Command.run(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "testsrc=size=352x288:rate=10", "-t", "12",
                "-c:v", "mpeg4", "-q:v", "5", input.path
            ])
        let run = try await record(["--source", "file:\(input.path)", "--fast"])
        defer { try? FileManager.default.removeItem(at: run.folder) }
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.lines.map { $0["frames"] as? Int } == [50, 50, 20])
        #expect(run.lines.map { $0["endReason"] as? String } == ["complete", "complete", "endOfInput"])
        for line in run.lines {
            let name = try #require(line["file"] as? String)
            try checkSegment(run.folder.appendingPathComponent(name), frames: line["frames"] as? Int ?? -1)
        }
    }

    @Test func aMissingCameraNamesThePathAndExits66() async throws {
        let run = try await record(["--source", "v4l2:/dev/no-such-camera"], config: "device-config/default.yaml")
        #expect(run.status == 66)
        #expect(run.stderr.contains("/dev/no-such-camera: no such device"))
        #expect(run.stderr.split(separator: "\n").count == 1)
    }

    @Test func aMissingVibrationMotorChipNamesChipAndLineAndExits66UnlessNotRequired() async throws {
        let motor = ["DASHCAM_HAPTICS_CHIP": "gpiochip-missing-7", "DASHCAM_HAPTICS_LINE": "haptic"]
        let run = try await record(["--source", "test-pattern", "--segments", "1"], environment: motor)
        #expect(run.status == 66)
        #expect(run.stderr.contains(#"GPIO chip "gpiochip-missing-7""#) && run.stderr.contains(#"line "haptic""#), "\(run.stderr)")
        #expect(run.lines.isEmpty, "nothing is recorded before the start-up checks pass")

        let optional = try await record(
            ["--source", "test-pattern", "--segments", "1", "--fast"],
            environment: motor.merging(["DASHCAM_HAPTICS_REQUIRED": "false"]) { $1 })
        #expect(optional.status == 0)
        #expect(optional.lines.count == 1)
        #expect(optional.stderr.contains("haptics.required is false, so the pulses are only logged"))
    }

    @Test func aPathThatIsNotACameraExits69() async throws {
        let run = try await record(["--source", "v4l2:/dev/null"], config: "device-config/default.yaml")
        #expect(run.status == 69)
        #expect(run.stderr.contains("/dev/null: not a video capture device"))
    }

    @Test func noEncoderOpeningListsWhatWasTriedAndExits70() async throws {
        let run = try await record(
            ["--source", "test-pattern", "--segments", "1"],
            config: "Tests/AgentTests/Fixtures/no-encoder.yaml")
        #expect(run.status == 70)
        #expect(
            run.stderr.contains(
                "no HEVC encoder opens; tried no_such_encoder (not in this FFmpeg build), mpeg4 (not an HEVC or H.264 encoder)"))
    }

    @Test func anUnwritableRecordingFolderExits73() async throws {
        let result = try Command.execute(
            Self.agent,
            [
                "record", "--config", Self.repo.appendingPathComponent("device-config/demo.yaml").path,
                "--out", "/proc/dashcam-segments", "--segments", "1"
            ])
        #expect(result.status == 73)
        #expect(result.stderr.contains("recording folder /proc/dashcam-segments is not writable"))
    }

    @Test func anUnknownConfigKeyExits78AndNamesTheKey() async throws {
        let run = try await record(["--segments", "1"], config: "Tests/AgentTests/Fixtures/typo.yaml")
        #expect(run.status == 78)
        #expect(run.stderr.contains("camera.fsp"))
        #expect(run.stderr.contains("camera.fps"))
    }

    @Test func setOverridesAKeyForTheRunAndABadOneExits78NamingIt() async throws {
        let run = try await record([
            "--source", "test-pattern", "--fast", "--segments", "1",
            "--set", "camera.fps=15", "--set", "encoder.segmentSeconds=2", "--set", "recording.maxMegabytes=64"
        ])
        defer { try? FileManager.default.removeItem(at: run.folder) }
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.lines.first?["fps"] as? Int == 15 && run.lines.first?["frames"] as? Int == 30, "\(run.lines)")
        #expect(run.stderr.contains("segments kept under 64 MB (recording.maxMegabytes)"), "\(run.stderr)")
        let noValue = try await record(["--segments", "1", "--set", "camera.fps"])
        #expect(
            noValue.status == 78 && noValue.stderr.contains("--set: 'camera.fps' is not allowed; expected KEY=VALUE"), "\(noValue.stderr)")
        let unknown = try await record(["--segments", "1", "--set", "camera.fsp=15"])
        #expect(unknown.status == 78 && unknown.stderr.contains("camera.fsp") && unknown.stderr.contains("camera.fps"), "\(unknown.stderr)")
        let outOfRange = try await record(["--segments", "1", "--set", "camera.fps=0"])
        #expect(outOfRange.status == 78 && outOfRange.stderr.contains("camera.fps"), "\(outOfRange.stderr)")
    }

    /// Without recording.maxMegabytes the recordings are kept under 80 % of their disk.
    @Test func theDefaultCapIsEightyPercentOfTheDisk() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("cap-\(UUID().uuidString)/not/yet/made")
        let attributes = try FileManager.default.attributesOfFileSystem(forPath: FileManager.default.temporaryDirectory.path)
        let disk = try #require((attributes[.systemSize] as? NSNumber)?.int64Value)
        var config = AgentConfig()
        config.recording.dir = folder.path
        #expect(config.retention.maxBytes == disk / 100 * 80)
        config.recording.maxMegabytes = 100
        #expect(config.retention.maxBytes == 100 << 20)
    }

    @Test func stopSignalClosesTheSegmentInProgressAndExitsZero() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("record-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.agent)
        process.arguments = [
            "record", "--config", Self.repo.appendingPathComponent("device-config/demo.yaml").path,
            "--out", folder.path, "--source", "test-pattern"
        ]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        try await Task.sleep(for: .seconds(2.5))
        process.terminate()
        let stdout = String(decoding: try out.fileHandleForReading.readToEnd() ?? Data(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let line = try #require(
            stdout.split(separator: "\n").last.flatMap {
                try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            })
        #expect(line["endReason"] as? String == "shutdown")
        // The segment in progress: cut short by the stop, with what 2.5 s gave (at most 25 frames
        // at 10 a second; a busy machine gives fewer, so only one is asked for).
        let frames = try #require(line["frames"] as? Int)
        #expect((1...30).contains(frames), "\(frames) frames")
        try checkSegment(
            folder.appendingPathComponent(try #require(line["file"] as? String)), frames: frames,
            durationMs: try #require(line["durationMs"] as? Int))
    }

    /// `uplink.url` is checked when the config loads (UplinkURLTests has the rule).
    @Test func aBadUplinkURLExits78NamingKeyValueAndWhatIsAllowed() async throws {
        let result = try await Command.executeAsync(
            Self.agent,
            ["record", "--config", Self.repo.appendingPathComponent("device-config/demo.yaml").path, "--segments", "1"],
            environment: ProcessInfo.processInfo.environment.merging(["DASHCAM_UPLINK_URL": "wss://guide.example:99999/v1/stream"]) { $1 })
        #expect(result.status == 78)
        #expect(
            result.stderr.contains(
                "uplink.url: 'wss://guide.example:99999/v1/stream' is not allowed; expected a wss://HOST[:PORT]/PATH URL"),
            "\(result.stderr)")
    }
}
