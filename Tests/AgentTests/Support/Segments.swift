import TestSupport
import Foundation
import Agent
import HAL

/// A segment as the pipeline would hand it over: a real 5-s clip (50 frames), other bytes for each
/// `seq` and at least `bytes` long (``SampleSegment/tagged(_:_:bytes:)``); its SHA-256 is real.
func testSegment(seq: Int, capturedAt: UInt64, bytes: Int = 100) -> Segment {
    let data = SampleSegment.tagged(SampleSegment.blockingClip, seq, bytes: bytes)
    return Segment(
        metadata: SegmentMetadata(
            seq: seq, capturedAt: Date(), captureStartMonotonicNs: capturedAt, durationMs: 5000, frames: 50,
            droppedFrames: 0, bytes: data.count,
            sha256: sha256Hex(data), encoder: "test", width: 320, height: 180, fps: 10,
            complete: true, endReason: .complete),
        data: data)
}
