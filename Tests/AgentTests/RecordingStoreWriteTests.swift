@testable import Agent
import Foundation
import HAL
import Testing

/// A segment's write happens outside the store's lock: `protect` and `status` answer while the
/// disk still holds a segment, and a `protect` that covers that segment still keeps it.
@Suite struct RecordingStoreWriteTests {
    /// A write that waits until the test lets it go, then writes the file for real.
    final class HeldWrite: Sendable {
        let gate = WaitableState((started: false, released: false))

        func write(_ bytes: [UInt8], to file: URL) throws(OutputError) {
            gate.update { $0.started = true }
            gate.wait(until: { $0.released }) { _ in }
            try RecordingFiles.write(bytes, to: file)
        }
    }

    func segment(seq: Int, at capturedAt: Date) -> Segment {
        Segment(
            metadata: SegmentMetadata(
                seq: seq, capturedAt: capturedAt, captureStartMonotonicNs: 0, durationMs: 5000, frames: 50, droppedFrames: 0,
                bytes: 100, sha256: "", encoder: "test", width: 16, height: 16, fps: 10, complete: true, endReason: .complete),
            data: [UInt8](repeating: 2, count: 100))
    }

    @Test func protectAndStatusDoNotWaitForASegmentOnItsWayToTheDisk() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("store-write-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let held = HeldWrite()
        let store = try RecordingStore(
            directory: root.path, retention: Retention(maxBytes: nil, protectedMaxBytes: 1 << 30, minFreeBytes: 0), segmentSeconds: 5
        ) { bytes, file throws(OutputError) in try held.write(bytes, to: file) }
        let start = Date(timeIntervalSince1970: 1_795_000_000)

        // The recording writes segment 7 on a thread of its own; the disk does not let it finish.
        let recorded = WaitableState<RecordingStore.Recorded?>(nil)
        let writer = try NamedThread.start(name: "test-writer") {
            let result = store.record(segment(seq: 7, at: start))
            recorded.update { $0 = result }
        }
        held.gate.wait(until: { $0.started }) { _ in }

        // Both answer while the write is held; had they waited for it, they could not return here.
        let usage = store.usage()
        let protection = try store.protect(.sequence(7...7))
        #expect(recorded.withLock { $0 } == nil, "the segment's write is still held")
        #expect(usage.segments == 0)
        #expect(protection.protected == [StoredSegment.path(for: segment(seq: 7, at: start).metadata, protected: true)])

        held.gate.update { $0.released = true }
        writer.join()
        let result = try #require(recorded.withLock { $0 })
        #expect(result.error == nil)
        #expect(result.path == protection.protected.first, "the request that came during the write kept the segment")
        #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent(protection.protected[0]).path))
        #expect(store.usage().protectedSegments == 1 && store.usage().segments == 0)
    }

    /// A `protect` reaching past the newest segment keeps the next one if the range covers any of
    /// its slots: also when its first frames were dropped, so its video (`durationMs`) is shorter
    /// than the time it covers from `capturedAt` and the range covers only its end.
    @Test func aPendingRangeKeepsASegmentWhoseFirstFramesWereDropped() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("store-write-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try RecordingStore(
            directory: root.path, retention: Retention(maxBytes: nil, protectedMaxBytes: 1 << 30, minFreeBytes: 0), segmentSeconds: 5)
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        // The last second of the segment that starts at `start`, asked before it is written.
        let range = start.addingTimeInterval(4)...start.addingTimeInterval(4.5)
        let asked = try store.protect(.time(range))
        #expect(asked.pendingUntilMs != nil)

        // Its first 20 of 50 frames were dropped: 3 s of video, 5 s of slots.
        var late = segment(seq: 3, at: start)
        late.metadata.frames = 30
        late.metadata.droppedFrames = 20
        late.metadata.durationMs = 3000
        late.metadata.complete = false
        let recorded = store.record(late)
        #expect(recorded.path?.hasPrefix(StoredSegment.protectedFolder + "/") == true, "\(String(describing: recorded.path))")
    }

    /// `protect --last 10s` on a busy device: the encoder is 20 s behind the camera, and the
    /// request is answered later than it was made. Nothing of its range is written yet; the
    /// segments that cover it are kept as they are written, and the one after it is not.
    @Test func aRangeAskedWhileTheRecordingIsBehindKeepsTheSegmentsStillToCome() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("store-write-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try RecordingStore(
            directory: root.path, retention: Retention(maxBytes: nil, protectedMaxBytes: 1 << 30, minFreeBytes: 0), segmentSeconds: 5)
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        // Written so far: the segment of 0–5 s. The request covers 20–29 s.
        _ = store.record(segment(seq: 0, at: start))
        let asked = try store.protect(.time(start.addingTimeInterval(20)...start.addingTimeInterval(29)))
        #expect(asked.protected.isEmpty && asked.pendingUntilMs == SegmentSelection.ms(start.addingTimeInterval(29)))

        let paths = (1...6).map { store.record(segment(seq: $0, at: start.addingTimeInterval(Double($0) * 5))).path ?? "" }
        let kept = paths.map { $0.hasPrefix(StoredSegment.protectedFolder + "/") }
        #expect(kept == [false, false, false, true, true, false], "\(paths)")
    }
}
