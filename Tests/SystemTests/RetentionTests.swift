@testable import Agent
import Foundation
import Glibc
import HAL
import TestSupport
import Testing

/// Loop recording: segments filed by day, the oldest going first, protected ones last and under
/// their own cap, and a full disk stopping neither recording nor streaming.
@Suite struct RetentionTests {
    func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("retention-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func put(_ path: String, bytes: Int, in root: URL) throws {
        let file = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(repeating: 1, count: bytes).write(to: file)
    }

    /// A fake segment of `bytes` bytes captured at `time` (`20261123T090000.000Z` form).
    func segment(seq: Int, at time: String, bytes: Int = 1000) throws -> Segment {
        let capturedAt = try Date(
            String(time.prefix(15)) + "Z", strategy: Date.ISO8601FormatStyle(dateSeparator: .omitted, timeSeparator: .omitted))
        return Segment(
            metadata: SegmentMetadata(
                seq: seq, capturedAt: capturedAt, captureStartMonotonicNs: 0, durationMs: 5000, frames: 50, droppedFrames: 0,
                bytes: bytes, sha256: "", encoder: "test", width: 16, height: 16, fps: 10, complete: true, endReason: .complete),
            data: [UInt8](repeating: 2, count: bytes))
    }

    func limits(max: Int64? = nil, protectedMax: Int64 = 1 << 40, minFree: Int64 = 0) -> Retention {
        Retention(maxBytes: max, protectedMaxBytes: protectedMax, minFreeBytes: minFree)
    }

    @Test func segmentsAreFiledByUTCDayAndTheOldestCaptureTimeGoesFirstAcrossRestarts() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        // Sequence numbers restart after a reboot; capture times do not. One file from before
        // segments were filed by day still counts.
        try put("000007-20261120T080000.000Z.mp4", bytes: 1000, in: root)
        try put("2026-11-21/000000-20261121T235955.000Z.mp4", bytes: 1000, in: root)
        try put("2026-11-22/000001-20261122T000000.000Z.mp4", bytes: 1000, in: root)
        try put("2026-11-22/000002-20261122T000005.000Z.mp4", bytes: 1000, in: root)
        try put("2026-11-22/notes.txt", bytes: 5000, in: root)
        let store = try RecordingStore(directory: root.path, retention: limits(max: 3000), segmentSeconds: 5)

        let first = store.record(try segment(seq: 3, at: "20261122T000010.000Z"))
        #expect(first.path == "2026-11-22/000003-20261122T000010.000Z.mp4")
        #expect(first.deleted.map(\.path) == ["000007-20261120T080000.000Z.mp4", "2026-11-21/000000-20261121T235955.000Z.mp4"])
        // A day folder goes with its last segment; one holding anything else stays.
        // (and the log of the order segments are recorded in, RecordingOrderTests)
        #expect(
            files(under: root) == [
                ".recording-order", "2026-11-22/000001-20261122T000000.000Z.mp4", "2026-11-22/000002-20261122T000005.000Z.mp4",
                "2026-11-22/000003-20261122T000010.000Z.mp4", "2026-11-22/notes.txt"
            ])
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("2026-11-21").path))

        let next = store.record(try segment(seq: 4, at: "20261123T000000.000Z"))
        #expect(next.path == "2026-11-23/000004-20261123T000000.000Z.mp4" && next.deleted.map(\.seq) == [1])
        #expect(store.usage().segments == 3 && store.usage().bytes == 3000)
    }

    @Test func protectedSegmentsGoLastAndUnderTheirOwnCap() {
        func stored(_ path: String, _ bytes: Int64 = 100) -> StoredSegment { StoredSegment(path: path, bytes: bytes)! }
        let loop = (0..<3).map { stored("2026-11-23/00000\($0)-20261123T09000\($0).000Z.mp4") }
        let kept = (0..<3).map { stored("protected/2026-11-22/00000\($0)-20261122T09000\($0).000Z.mp4") }
        let all = (kept + loop).sorted { $0.capturedAt < $1.capturedAt }
        #expect(kept.allSatisfy(\.isProtected) && !loop.contains(where: \.isProtected))

        // The loop cap never touches protected segments, however old.
        #expect(limits(max: 150).victims(of: all, freeBytes: nil, incoming: 100) == Array(loop.prefix(3)))
        // Their own cap takes the oldest protected ones.
        #expect(limits(protectedMax: 250).victims(of: all, freeBytes: nil, incoming: 100, incomingProtected: true) == Array(kept.prefix(2)))
        // The free space floor takes every unprotected segment, never a protected one …
        #expect(limits(minFree: 1000).victims(of: all, freeBytes: 650, incoming: 100) == loop)
        #expect(limits(minFree: 1000).victims(of: all, freeBytes: 2000, incoming: 100).isEmpty)
        // … unless the segment would not fit at all: then the oldest protected, only as many as it needs.
        #expect(limits(minFree: 1000).victims(of: all, freeBytes: 50, incoming: 500) == loop + kept.prefix(2))
    }

    @Test func protectMovesTheNewestOfASequenceNumberAndKeepsSegmentsStillToCome() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        // Segment 1 of an earlier run and of this one.
        try put("2026-11-22/000001-20261122T080005.000Z.mp4", bytes: 100, in: root)
        let store = try RecordingStore(directory: root.path, retention: limits(), segmentSeconds: 5)
        let times = ["20261123T090000.000Z", "20261123T090005.000Z", "20261123T090100.000Z", "20261123T090105.000Z"]
        for (seq, time) in times.enumerated() { _ = store.record(try segment(seq: seq, at: time, bytes: 100)) }
        let bySeq = try store.protect(.sequence(1...1))
        #expect(bySeq.protected == ["protected/2026-11-23/000001-20261123T090005.000Z.mp4"])
        #expect(try store.protect(.sequence(1...1)).alreadyProtected == 1)
        #expect(files(under: root).contains("2026-11-22/000001-20261122T080005.000Z.mp4"), "the earlier run's segment 1 stays")

        // 09:00:58–09:01:02 overlaps the segment from 09:01:00 only (09:00:05 ended at 09:00:10).
        let byTime = try store.protect(try SegmentSelection.parse("2026-11-23T09:00:58Z..2026-11-23T09:01:02Z"))
        #expect(byTime.protected == ["protected/2026-11-23/000002-20261123T090100.000Z.mp4"] && byTime.pendingUntilMs == nil)

        // A range reaching past the newest segment keeps what is still to come, until its end.
        let ahead = try store.protect(.time(try date("20261123T090108")...date("20261123T090112")))
        #expect(ahead.protected == ["protected/2026-11-23/000003-20261123T090105.000Z.mp4"] && ahead.pendingUntilMs != nil)
        #expect(
            store.record(try segment(seq: 4, at: "20261123T090110.000Z", bytes: 100)).path
                == "protected/2026-11-23/000004-20261123T090110.000Z.mp4")
        #expect(
            store.record(try segment(seq: 5, at: "20261123T090115.000Z", bytes: 100)).path == "2026-11-23/000005-20261123T090115.000Z.mp4")
        #expect(store.usage().protectedSegments == 4)
        #expect(try store.protect(.sequence(40...41)).protected.isEmpty)

        // The store reads the folder again after a restart: the same segments, the same split.
        let reopened = try RecordingStore(directory: root.path, retention: limits(), segmentSeconds: 5)
        #expect(reopened.usage() == store.usage())
    }

    @Test func protectingOverTheCapDeletesWhatWasProtectedBeforeNeverTheRequest() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try RecordingStore(directory: root.path, retention: limits(protectedMax: 350), segmentSeconds: 5)
        for seq in 0..<6 { _ = store.record(try segment(seq: seq, at: "20261123T09000\(seq).000Z", bytes: 100)) }
        func kept(_ seq: Int) -> String { "protected/2026-11-23/00000\(seq)-20261123T09000\(seq).000Z.mp4" }
        _ = try store.protect(.sequence(3...4))
        // An older incident, protected after a newer one: the cap makes room among the segments
        // protected before (the oldest of them, 3), never among the two just asked for.
        let older = try store.protect(.sequence(1...2))
        #expect(older.protected == [kept(1), kept(2)] && older.deleted == [kept(3)])
        #expect(older.protectedSegments == 3 && older.protectedBytes == 300)
        // A request larger than the cap keeps its newest segments (5, and 4 and 2 already kept);
        // its oldest unprotected one (0) stays in the loop, and 1, protected before, makes room.
        let large = try store.protect(.sequence(0...5))
        #expect(large.protected == [kept(5)] && large.alreadyProtected == 2 && large.overCap == 1)
        #expect(large.deleted == [kept(1)] && large.protectedSegments == 3 && large.protectedBytes == 300)
        #expect(files(under: root).contains("2026-11-23/000000-20261123T090000.000Z.mp4"))
        #expect(ProtectCommand.text(large).contains("1 older segment(s) of the selection stay in the loop"))
    }

    @Test func aSegmentDeletedByHandIsSkippedNotAnError() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try RecordingStore(directory: root.path, retention: limits(), segmentSeconds: 5)
        for seq in 0..<3 { _ = store.record(try segment(seq: seq, at: "20261123T09000\(seq * 2).000Z", bytes: 100)) }
        try FileManager.default.removeItem(at: root.appendingPathComponent("2026-11-23/000001-20261123T090002.000Z.mp4"))
        let result = try store.protect(.sequence(0...2))
        #expect(
            result.protected == [
                "protected/2026-11-23/000000-20261123T090000.000Z.mp4", "protected/2026-11-23/000002-20261123T090004.000Z.mp4"
            ])
        #expect(store.usage().segments == 0 && store.usage().protectedSegments == 2)
    }

    @Test func leftoversInDayAndProtectedFoldersAreRemovedAtStart() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        try put("2026-11-23/000001-20261123T090000.000Z.mp4", bytes: 10, in: root)
        try put("2026-11-23/.000002-20261123T090005.000Z.mp4.partial", bytes: 10, in: root)
        try put("protected/2026-11-22/.000009-20261122T090005.000Z.mp4.partial", bytes: 10, in: root)
        let store = try RecordingStore(directory: root.path, retention: limits(), segmentSeconds: 5)
        #expect(
            store.removedLeftovers.sorted() == [
                "2026-11-23/.000002-20261123T090005.000Z.mp4.partial", "protected/2026-11-22/.000009-20261122T090005.000Z.mp4.partial"
            ])
        #expect(files(under: root) == ["2026-11-23/000001-20261123T090000.000Z.mp4"])
    }

    func date(_ text: String) throws -> Date {
        try Date(text + "Z", strategy: Date.ISO8601FormatStyle(dateSeparator: .omitted, timeSeparator: .omitted))
    }

    @Test func aCapKeepsTheFolderUnderItWhileRecording() async throws {
        let dir = try folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let run = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "DASHCAM_RECORDING_MAX_MEGABYTES=1", "DASHCAM_SPEECH_SINK=wav:\(dir.path)/speech",
                "DASHCAM_STATUS_SOCKET=\(dir.path)/status.sock",
                RecordCommandTests.agent, "record", "--config",
                RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path,
                "--out", dir.appendingPathComponent("segments").path, "--fast", "--segments", "40"
            ])
        #expect(run.status == 0, "\(run.stderr)")
        let folder = dir.appendingPathComponent("segments")
        let segments = files(under: folder).filter { $0.hasSuffix(".mp4") }
        let bytes = try segments.reduce(0) { total, path in
            total + (try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent(path).path)[.size] as? Int ?? 0)
        }
        #expect(bytes <= 1 << 20, "\(bytes) bytes in \(segments.count) segments")
        #expect(segments.count < 40 && segments.contains { $0.contains("/000039-") }, "the newest stays: \(segments)")
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
        let run = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "DASHCAM_RECORDING_MIN_FREE_MEGABYTES=0", "DASHCAM_SPEECH_SINK=wav:/tmp/full-disk-speech-\(getpid())",
                "DASHCAM_STATUS_SOCKET=/tmp/full-disk-\(getpid()).sock",
                RecordCommandTests.agent, "record", "--config",
                RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path,
                "--out", dir.path, "--fast", "--segments", "12"
            ])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count == 12, "every segment is still produced (and would be streamed)")
        // A segment (about 50 KB) never fits in 16 KB, whatever retention deletes.
        #expect(lines.allSatisfy { !$0.contains("\"file\"") }, "no segment had room on the disk")
        #expect(run.stderr.contains("recording and streaming go on without the file"))
        // The recording order may name segments whose files never came (each is logged before
        // its write); it is the only file.
        let left = files(under: dir).filter { $0 != ".recording-order" }
        #expect(left.isEmpty, "no torn temporary file: \(left)")
    }
}
