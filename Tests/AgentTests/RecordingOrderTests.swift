@testable import Agent
import Foundation
import HAL
import Testing

/// Retention by the order segments were recorded in, not by the time in their names: a clock
/// that steps back (NTP after a boot with a clock ahead, a board without a clock battery) must not
/// make the fresh footage go first, and the order holds across a restart.
@Suite struct RecordingOrderTests {
    static func segment(seq: Int, at capturedAt: Date, bytes: Int = 1000) -> Segment {
        Segment(
            metadata: SegmentMetadata(
                seq: seq, capturedAt: capturedAt, captureStartMonotonicNs: 0, durationMs: 5000, frames: 50, droppedFrames: 0,
                bytes: bytes, sha256: "", encoder: "test", width: 16, height: 16, fps: 10, complete: true, endReason: .complete),
            data: [UInt8](repeating: UInt8(seq % 256), count: bytes))
    }

    /// Appends half a name to the folder's log, as a power cut in the middle of an append leaves it.
    static func cutLastLineShort(in root: URL) throws -> URL {
        let log = root.appendingPathComponent(RecordingOrder.fileName)
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        handle.write(Data("000099-2026".utf8))
        try handle.close()
        return log
    }

    @Test func aClockSteppedBackDoesNotMakeFreshFootageGoFirst() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("order-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        // Room for four segments.
        let retention = Retention(maxBytes: 4000, protectedMaxBytes: 1 << 30, minFreeBytes: 0)
        var store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        let ahead = Date(timeIntervalSince1970: 1_795_700_000)  // the clock an hour ahead
        let right = ahead.addingTimeInterval(-3600)
        for seq in 0..<3 { _ = store.record(Self.segment(seq: seq, at: ahead.addingTimeInterval(Double(seq) * 5))) }
        // NTP steps the clock back an hour; recording goes on.
        var deleted: [StoredSegment] = []
        for seq in 3..<6 { deleted += store.record(Self.segment(seq: seq, at: right.addingTimeInterval(Double(seq) * 5))).deleted }
        #expect(deleted.map(\.seq) == [0, 1], "the oldest recorded go, though their names say later: \(deleted.map(\.path))")
        #expect(StoredSegment.all(in: root).map(\.seq).sorted() == [2, 3, 4, 5])

        // A restart reads the order back, and the next segment again deletes the oldest recorded.
        store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        let next = store.record(Self.segment(seq: 0, at: right.addingTimeInterval(100)))
        #expect(next.deleted.map(\.seq) == [2], "\(next.deleted.map(\.path))")

        // Protecting one keeps its place; the loop goes on deleting the oldest recorded.
        _ = try store.protect(.sequence(3...3))
        #expect(store.record(Self.segment(seq: 1, at: right.addingTimeInterval(105))).deleted.isEmpty, "room left by the protected one")
        let after = store.record(Self.segment(seq: 2, at: right.addingTimeInterval(110)))
        #expect(after.deleted.map(\.seq) == [4], "\(after.deleted.map(\.path))")
    }

    /// A kill or a power cut right after a segment's rename, before the store had done anything
    /// else: the segment is on the disk, whole, and is still the newest after a restart.
    @Test func aSegmentWholeOnTheDiskIsLoggedEvenIfNothingAfterItsRenameRan() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("order-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        // Room for three segments.
        let retention = Retention(maxBytes: 3000, protectedMaxBytes: 1 << 30, minFreeBytes: 0)
        let base = Date(timeIntervalSince1970: 1_795_700_000)
        let store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        for seq in 0..<2 { _ = store.record(Self.segment(seq: seq, at: base.addingTimeInterval(Double(seq) * 5))) }
        // The third is renamed into place; then the process is gone. (Here: the write "fails"
        // after the rename, so nothing that follows a write runs.)
        let cut = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5) { bytes, file throws(OutputError) in
            try RecordingFiles.write(bytes, to: file)
            throw OutputError(path: file.path, reason: "the power went")
        }
        #expect(cut.record(Self.segment(seq: 2, at: base.addingTimeInterval(10))).error != nil)
        #expect(StoredSegment.all(in: root).map(\.seq).sorted() == [0, 1, 2], "whole on the disk")

        // After the restart the loop deletes the oldest recorded, not the one the power cut caught.
        let restarted = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        let next = restarted.record(Self.segment(seq: 3, at: base.addingTimeInterval(15)))
        #expect(next.deleted.map(\.seq) == [0], "\(next.deleted.map(\.path))")
        #expect(StoredSegment.all(in: root).map(\.seq).sorted() == [1, 2, 3])
    }

    @Test func aNameAfterALineCutShortStartsALineOfItsOwn() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("order-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let retention = Retention(maxBytes: nil, protectedMaxBytes: 1 << 30, minFreeBytes: 0)
        let base = Date(timeIntervalSince1970: 1_795_700_000)
        var store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        // Names whose times say the opposite of the order they were recorded in.
        for seq in 0..<2 { _ = store.record(Self.segment(seq: seq, at: base.addingTimeInterval(Double(-seq) * 60))) }
        let log = try Self.cutLastLineShort(in: root)
        store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        _ = store.record(Self.segment(seq: 2, at: base.addingTimeInterval(-180)))
        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.last?.hasPrefix("000002-") == true, "\(lines)")
        #expect(RecordingOrder(root: root).sorted(StoredSegment.all(in: root)).map(\.seq) == [0, 1, 2])
    }

    @Test func aLogCutShortOrGrownLongStillOrders() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("order-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let retention = Retention(maxBytes: nil, protectedMaxBytes: 1 << 30, minFreeBytes: 0)
        let store = try RecordingStore(directory: root.path, retention: retention, segmentSeconds: 5)
        let base = Date(timeIntervalSince1970: 1_795_700_000)
        for seq in 0..<3 { _ = store.record(Self.segment(seq: seq, at: base.addingTimeInterval(Double(-seq) * 60))) }
        // A power cut in the middle of an append, and names of files long gone.
        let log = try Self.cutLastLineShort(in: root)
        let order = RecordingOrder(root: root)
        #expect(order.sorted(StoredSegment.all(in: root)).map(\.seq) == [0, 1, 2], "recording order, not the names' times")
        var long = RecordingOrder(root: root)
        for i in 0..<100 { long.append("000\(i)-20261126T000000.000Z.mp4") }
        long.compact(keeping: order.sorted(StoredSegment.all(in: root)))
        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3 && RecordingOrder(root: root).sorted(StoredSegment.all(in: root)).map(\.seq) == [0, 1, 2])
    }
}
