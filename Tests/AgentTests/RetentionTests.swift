import Agent
import Foundation
import Glibc
import TestSupport
import Testing

/// Loop recording: the oldest segments go first, and a full disk stops neither recording nor streaming.
@Suite struct RetentionTests {
    func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("retention-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func theOldestCaptureTimeGoesFirstAcrossRestartsOfTheSequence() throws {
        let dir = try folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        // Sequence numbers restart after a reboot; capture times do not.
        let names = ["000007-20261120T080000.000Z.mp4", "000000-20261121T090000.000Z.mp4",
                     "000001-20261121T090005.000Z.mp4", "000002-20261121T090010.000Z.mp4"]
        for name in names { try Data(repeating: 1, count: 1000).write(to: dir.appendingPathComponent(name)) }
        try Data(repeating: 1, count: 5000).write(to: dir.appendingPathComponent("notes.txt"))
        let retention = Retention(directory: dir, maxBytes: 3000, minFreeBytes: 0)
        #expect(retention.makeRoom(for: 1000) == ["000007-20261120T080000.000Z.mp4", "000000-20261121T090000.000Z.mp4"])
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(left == ["000001-20261121T090005.000Z.mp4", "000002-20261121T090010.000Z.mp4", "notes.txt"])
        #expect(retention.makeRoom(for: 1000) == [], "under the cap now")
    }

    @Test func theFreeSpaceFloorDeletesToo() throws {
        let dir = try folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        for second in 0..<3 { try Data(repeating: 1, count: 100).write(to: dir.appendingPathComponent("00000\(second)-20261121T09000\(second).000Z.mp4")) }
        // A floor no disk can keep: every segment goes, and nothing breaks.
        let retention = Retention(directory: dir, maxBytes: nil, minFreeBytes: Int64.max / 2)
        #expect(retention.makeRoom(for: 100).count == 3)
    }

    @Test func aCapKeepsTheFolderUnderItWhileRecording() async throws {
        let dir = try folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let run = try await Command.executeAsync("/usr/bin/env", [
            "DASHCAM_OUTPUT_MAX_MEGABYTES=1", "DASHCAM_SPEECH_SINK=wav:\(dir.path)/speech", "DASHCAM_STATUS_SOCKET=\(dir.path)/status.sock",
            RecordCommandTests.agent, "record", "--config", RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path,
            "--out", dir.appendingPathComponent("segments").path, "--fast", "--segments", "40",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("segments").path).filter { $0.hasSuffix(".mp4") }.sorted()
        let bytes = try segments.reduce(0) { total, name in
            total + (try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("segments/\(name)").path)[.size] as? Int ?? 0)
        }
        #expect(bytes <= 1 << 20, "\(bytes) bytes in \(segments.count) segments")
        #expect(segments.count < 40 && segments.last?.hasPrefix("000039-") == true, "the newest stays: \(segments)")
        #expect(run.stderr.contains("oldest segment(s) to make room"))
    }

    @Test(.enabled(if: getuid() == 0, "needs root to mount a small tmpfs"))
    func aFullDiskStopsNeitherRecordingNorTheProcess() async throws {
        let dir = try folder()
        defer {
            _ = try? Command.execute("umount", [dir.path])
            try? FileManager.default.removeItem(at: dir)
        }
        let mounted = try Command.execute("mount", ["-t", "tmpfs", "-o", "size=16k", "tmpfs", dir.path])
        try #require(mounted.status == 0, "mount: \(mounted.stderr)")
        let run = try await Command.executeAsync("/usr/bin/env", [
            "DASHCAM_OUTPUT_MIN_FREE_MEGABYTES=0", "DASHCAM_SPEECH_SINK=wav:/tmp/full-disk-speech-\(getpid())",
            "DASHCAM_STATUS_SOCKET=/tmp/full-disk-\(getpid()).sock",
            RecordCommandTests.agent, "record", "--config", RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path,
            "--out", dir.path, "--fast", "--segments", "12",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count == 12, "every segment is still produced (and would be streamed)")
        // A segment (about 50 KB) never fits in 16 KB, whatever retention deletes.
        #expect(lines.allSatisfy { !$0.contains("\"file\"") }, "no segment had room on the disk")
        #expect(run.stderr.contains("recording and streaming go on without the file"))
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".") }
        #expect(left.isEmpty, "no torn temporary file: \(left)")
    }
}
