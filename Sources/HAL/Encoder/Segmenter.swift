internal import CFFmpeg
import Foundation
internal import Crypto

/// Cuts the encoded stream into self-contained MP4 segments on the ``SegmentClock`` timeline.
///
/// Packets carry their frame slot as `pts`; a segment closes as soon as its last slot is written,
/// or, when that frame was dropped, when the first packet of the next segment arrives.
public final class Segmenter {
    public private(set) var clock: SegmentClock
    private let format: VideoFormat
    private let writer = MP4Writer()
    private var nextSeq: Int
    private var closed: [Segment] = []

    // The segment being written.
    private var segmentIndex: Int64 = -1
    private var firstPts: Int64 = 0
    private var lastPts: Int64 = 0
    private var frames = 0
    private var encoderName = ""
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` when the timeline started, to date segments.
    private var wallOffset: Double = 0

    public init(format: VideoFormat, segmentSeconds: Int, firstSeq: Int = 0) {
        self.format = format
        self.clock = SegmentClock(fps: format.fps, segmentSeconds: segmentSeconds)
        self.nextSeq = firstSeq
    }

    /// Puts a frame on the timeline; `nil` means skip it.
    public func place(_ frame: Frame) -> SegmentClock.Placement? {
        if clock.anchor == nil {
            wallOffset = Date().timeIntervalSince1970 - Double(MonotonicClock.now()) / 1e9
        }
        return clock.place(timestamp: frame.timestamp)
    }

    /// Starts a new timeline: the source reopened. Call after ``close(reason:)``.
    public func restartTimeline() { clock.restart() }

    /// Segments finished since the last call, oldest first.
    public func takeClosed() -> [Segment] {
        defer { closed.removeAll(keepingCapacity: true) }
        return closed
    }

    /// Closes the segment in progress early (after the encoder was flushed into this segmenter).
    public func close(reason: SegmentEndReason) throws {
        try finishSegment(reason: reason)
    }

    func write(_ packet: UnsafeMutablePointer<AVPacket>, codec: UnsafePointer<AVCodecContext>, encoderName: String) throws {
        let pts = packet.pointee.pts
        let index = clock.segmentIndex(ofSlot: pts)
        if index != segmentIndex {
            if writer.isOpen { try finishSegment(reason: .complete) }
            try writer.begin(codec: codec, framesPerSegment: clock.framesPerSegment)
            segmentIndex = index
            firstPts = pts
            frames = 0
            self.encoderName = encoderName
        }
        lastPts = pts
        frames += 1
        if packet.pointee.duration <= 0 { packet.pointee.duration = 1 }
        packet.pointee.pts -= firstPts
        packet.pointee.dts -= firstPts
        try writer.write(packet)
        if (pts + 1) % Int64(clock.framesPerSegment) == 0 {
            try finishSegment(reason: .complete)
        }
    }

    private func finishSegment(reason: SegmentEndReason) throws {
        guard writer.isOpen else { return }
        let n = Int64(clock.framesPerSegment)
        let start = segmentIndex * n
        // A segment that ran to its end spans all N slots even when its last frames were dropped.
        let span = reason == .complete ? n : lastPts + 1 - start
        let bytes = try writer.finish()
        let startTime = clock.time(ofSlot: start)
        let metadata = SegmentMetadata(
            seq: nextSeq,
            capturedAt: Date(timeIntervalSince1970: Double(startTime) / 1e9 + wallOffset),
            captureStartMonotonicNs: startTime,
            durationMs: Int((lastPts + 1 - firstPts) * 1000 / Int64(format.fps)),
            frames: frames,
            droppedFrames: Int(span) - frames,
            bytes: bytes.count,
            sha256: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(),
            encoder: encoderName,
            width: format.width, height: format.height, fps: format.fps,
            complete: reason == .complete && frames == Int(n),
            endReason: reason
        )
        nextSeq += 1
        segmentIndex = -1
        closed.append(Segment(metadata: metadata, data: bytes))
    }
}
