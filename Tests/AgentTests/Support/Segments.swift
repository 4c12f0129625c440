import TestSupport
import Foundation
import HAL

/// A segment of `bytes` made-up bytes, as the pipeline would hand it over; its SHA-256 is real.
func testSegment(seq: Int, capturedAt: UInt64, bytes: Int = 100) -> Segment {
    let data = (0..<bytes).map { UInt8(truncatingIfNeeded: $0 &+ seq) }
    return Segment(
        metadata: SegmentMetadata(
            seq: seq, capturedAt: Date(), captureStartMonotonicNs: capturedAt, durationMs: 5000, frames: 50,
            droppedFrames: 0, bytes: data.count,
            sha256: sha256Hex(data), encoder: "test", width: 320, height: 180, fps: 10,
            complete: true, endReason: .complete),
        data: data)
}
