@testable import Agent
import Foundation
import Glibc
import HAL
import TestSupport
import Testing

/// Symbolic links inside the recording folder are never followed: not listed, counted, moved or
/// deleted through, and never written through.
@Suite struct RecordingLinksTests {
    /// The recording folder and, beside it, a folder it must never touch.
    func folders() throws -> (root: URL, outside: URL, remove: () -> Void) {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("links-\(UUID().uuidString)")
        let root = base.appendingPathComponent("recordings")
        let outside = base.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
        return (root, outside, { try? FileManager.default.removeItem(at: base) })
    }

    func put(_ path: String, bytes: Int = 1000, in folder: URL) throws {
        let file = folder.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(repeating: 1, count: bytes).write(to: file)
    }

    func link(_ path: String, to target: URL, in root: URL) throws {
        let file = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: file.path, withDestinationPath: target.path)
    }

    func segment(seq: Int, at time: String, bytes: Int = 1000) throws -> Segment {
        let capturedAt = try Date(time, strategy: Date.ISO8601FormatStyle())
        return Segment(
            metadata: SegmentMetadata(
                seq: seq, capturedAt: capturedAt, captureStartMonotonicNs: 0, durationMs: 5000, frames: 50, droppedFrames: 0,
                bytes: bytes, sha256: "", encoder: "test", width: 16, height: 16, fps: 10, complete: true, endReason: .complete),
            data: [UInt8](repeating: 2, count: bytes))
    }

    func retention(max: Int64) -> Retention {
        Retention(maxBytes: max, protectedMaxBytes: 1 << 40, minFreeBytes: 0)
    }

    @Test func linkedDayFoldersAndFilesAreNeitherCountedNorDeletedThrough() throws {
        let (root, outside, remove) = try folders()
        defer { remove() }
        // Files named like segments, outside the recording.
        try put("000001-20261120T080000.000Z.mp4", in: outside)
        try put("000002-20261120T080005.000Z.mp4", in: outside)
        try put("target.mp4", in: outside)
        try link("2026-11-20", to: outside, in: root)
        try link(StoredSegment.protectedFolder, to: outside, in: root)
        try put("2026-11-21/000003-20261121T080000.000Z.mp4", in: root)
        try link("2026-11-21/000004-20261121T080005.000Z.mp4", to: outside.appendingPathComponent("target.mp4"), in: root)

        #expect(StoredSegment.all(in: root).map(\.path) == ["2026-11-21/000003-20261121T080000.000Z.mp4"])
        #expect(
            StoredSegment.symbolicLinks(in: root).map(\.path) == [
                "2026-11-20", StoredSegment.protectedFolder, "2026-11-21/000004-20261121T080005.000Z.mp4"
            ])

        // A cap of one segment: the loop deletes its own oldest, never what the links point at.
        let store = try RecordingStore(directory: root.path, retention: retention(max: 1000), segmentSeconds: 5)
        #expect(store.usage().segments == 1)
        let recorded = store.record(try segment(seq: 5, at: "2026-11-21T08:00:10Z"))
        #expect(recorded.error == nil)
        #expect(recorded.deleted.map(\.path) == ["2026-11-21/000003-20261121T080000.000Z.mp4"])
        #expect(files(under: outside) == ["000001-20261120T080000.000Z.mp4", "000002-20261120T080005.000Z.mp4", "target.mp4"])
        #expect(RecordingFiles.isSymbolicLink(root.appendingPathComponent("2026-11-20").path))
        #expect(RecordingFiles.isSymbolicLink(root.appendingPathComponent("2026-11-21/000004-20261121T080005.000Z.mp4").path))
    }

    @Test func aSegmentIsNeverWrittenThroughALinkedDayFolderOrTemporaryName() throws {
        let (root, outside, remove) = try folders()
        defer { remove() }
        try link("2026-11-22", to: outside, in: root)
        let store = try RecordingStore(directory: root.path, retention: retention(max: 1 << 30), segmentSeconds: 5)

        let refused = store.record(try segment(seq: 0, at: "2026-11-22T10:00:00Z"))
        #expect(refused.path == nil)
        #expect(
            refused.error.map { "\($0)".contains("2026-11-22 is not writable: it is a symbolic link, which the recording never follows") }
                == true, "\(String(describing: refused.error))")
        #expect(files(under: outside).isEmpty)

        // A link planted under the temporary name: the segment is written as a new file, the
        // link's target is not touched.
        try put("victim", bytes: 10, in: outside)
        let name = "000001-20261123T100000.000Z.mp4"
        try link("2026-11-23/.\(name).partial", to: outside.appendingPathComponent("victim"), in: root)
        let written = store.record(try segment(seq: 1, at: "2026-11-23T10:00:00Z", bytes: 500))
        #expect(written.path == "2026-11-23/\(name)", "\(String(describing: written.error))")
        #expect(try Data(contentsOf: outside.appendingPathComponent("victim")) == Data(repeating: 1, count: 10))
        #expect(try Data(contentsOf: root.appendingPathComponent("2026-11-23/\(name)")) == Data(repeating: 2, count: 500))
        #expect(!RecordingFiles.isSymbolicLink(root.appendingPathComponent("2026-11-23/\(name)").path))
    }

    @Test func theWriteProbeIsNotWrittenThroughALink() throws {
        let (root, outside, remove) = try folders()
        defer { remove() }
        try put("victim", bytes: 10, in: outside)
        try link(".write-test-\(getpid())", to: outside.appendingPathComponent("victim"), in: root)
        try RecordingFiles.checkWritable(root)
        #expect(try Data(contentsOf: outside.appendingPathComponent("victim")) == Data(repeating: 1, count: 10))
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent(".write-test-\(getpid())").path))
    }

    @Test func removingByPathDoesNotPassThroughALinkedFolder() throws {
        let (root, outside, remove) = try folders()
        defer { remove() }
        try put("000001-20261120T080000.000Z.mp4", in: outside)
        try link("2026-11-20", to: outside, in: root)
        try put("2026-11-21/000002-20261121T080000.000Z.mp4", in: root)

        #expect(
            RecordingFiles.remove("2026-11-20/000001-20261120T080000.000Z.mp4", in: root) == ELOOP
                || RecordingFiles.remove("2026-11-20/000001-20261120T080000.000Z.mp4", in: root) == ENOTDIR)
        #expect(files(under: outside) == ["000001-20261120T080000.000Z.mp4"])
        // A link at the end is removed itself.
        #expect(RecordingFiles.remove("2026-11-20", in: root) == 0)
        #expect(files(under: outside) == ["000001-20261120T080000.000Z.mp4"])
        #expect(RecordingFiles.remove("2026-11-21/000002-20261121T080000.000Z.mp4", in: root) == 0)
        #expect(RecordingFiles.remove("../elsewhere/000001-20261120T080000.000Z.mp4", in: root) == EINVAL)
        #expect(files(under: outside) == ["000001-20261120T080000.000Z.mp4"])
    }

    @Test func theLinksAreNamedInOneLogLine() throws {
        let (root, outside, remove) = try folders()
        defer { remove() }
        let lines = LogLines()
        StoredSegment.warnAboutSymbolicLinks(in: root, logger: lines.logger)
        #expect(lines.all.isEmpty)
        try link("2026-11-20", to: outside, in: root)
        try link("notes", to: outside, in: root)
        StoredSegment.warnAboutSymbolicLinks(in: root, logger: lines.logger)
        #expect(
            lines.all == [
                "warning recording: 1 symbolic link(s) in \(root.path) are skipped and never followed (not counted, moved or deleted; segments are not written through them): 2026-11-20 -> \(outside.path)"
            ])
    }
}
