public import Foundation

/// Why a segment ended.
public enum SegmentEndReason: String, Codable, Sendable {
    /// It holds its full length.
    case complete
    /// The camera disappeared (unplugged, `ENODEV`, `POLLERR`); closed early.
    case cameraLost
    /// The camera stopped delivering frames; closed early.
    case cameraStalled
    /// A file source ended.
    case endOfInput
    /// The agent was asked to stop.
    case shutdown
    /// The car was parked: continuous recording stopped.
    case parked
}

/// Which of a camera's two streams a segment belongs to (``SegmentMetadata/stream``).
public enum SegmentStream: String, Codable, Sendable {
    /// The recording at the camera's full size and rate: the loop recording, incidents, clips.
    case evidence
    /// The small HEVC copy that goes to the guidance server (`uplink.video`).
    case guidance
}

/// The segment of the other stream that starts at the same captured frame: same sequence number,
/// same wall time and monotonic start (``SegmentMetadata/partner``).
public struct SegmentPartner: Codable, Sendable, Equatable {
    public var stream: SegmentStream
    public var seq: Int
    public var bytes: Int
    public var sha256: String
    public var encoder: String
    public var width: Int
    public var height: Int
    public var fps: Int
    public var frames: Int

    public init(of metadata: SegmentMetadata, stream: SegmentStream) {
        self.stream = stream
        seq = metadata.seq
        bytes = metadata.bytes
        sha256 = metadata.sha256
        encoder = metadata.encoder
        width = metadata.width
        height = metadata.height
        fps = metadata.fps
        frames = metadata.frames
    }
}

/// What the encoder and the segmenter did for one finished segment. The agent adds what it means
/// (its GPS track, the clock's source, a parked car's trigger) and prints one JSON line of both.
public struct SegmentMetadata: Codable, Sendable, Equatable {
    public var seq: Int
    /// Wall-clock time of the segment's first frame slot.
    public var capturedAt: Date
    /// `CLOCK_MONOTONIC` time of the segment's first frame slot, in nanoseconds.
    public var captureStartMonotonicNs: UInt64
    public var durationMs: Int
    public var frames: Int
    /// Frame slots in the segment's span that no frame filled.
    public var droppedFrames: Int
    public var bytes: Int
    public var sha256: String
    public var encoder: String
    public var width: Int
    public var height: Int
    public var fps: Int
    public var complete: Bool
    public var endReason: SegmentEndReason
    /// With two streams (`uplink.video`): which one this is; nil with one stream.
    public var stream: SegmentStream?
    /// With two streams: the other stream's segment from the same frame on.
    public var partner: SegmentPartner?
    /// The codec, `hevc` or `h264` (nil in lines of an earlier release: HEVC).
    public var codec: VideoCodec?

    public init(
        seq: Int, capturedAt: Date, captureStartMonotonicNs: UInt64, durationMs: Int, frames: Int,
        droppedFrames: Int, bytes: Int, sha256: String, encoder: String, width: Int, height: Int, fps: Int,
        complete: Bool, endReason: SegmentEndReason
    ) {
        self.seq = seq
        self.capturedAt = capturedAt
        self.captureStartMonotonicNs = captureStartMonotonicNs
        self.durationMs = durationMs
        self.frames = frames
        self.droppedFrames = droppedFrames
        self.bytes = bytes
        self.sha256 = sha256
        self.encoder = encoder
        self.width = width
        self.height = height
        self.fps = fps
        self.complete = complete
        self.endReason = endReason
    }
}

/// A self-contained MP4 held in memory, as the segmenter closed it, with its metadata.
public struct EncodedSegment: Sendable {
    public var metadata: SegmentMetadata
    public var data: [UInt8]
    /// `CLOCK_MONOTONIC` nanoseconds when the segmenter closed it: where its way to the wire starts.
    public var closedMonotonicNs: UInt64
    /// The wall clock was stepped by this many seconds before this segment began (NTP arriving
    /// after boot, a GPS fix setting it): the segment is dated on a new timeline.
    public var clockStepSeconds: Double?

    public init(
        metadata: SegmentMetadata, data: [UInt8], closedMonotonicNs: UInt64 = MonotonicClock.now(), clockStepSeconds: Double? = nil
    ) {
        self.metadata = metadata
        self.data = data
        self.closedMonotonicNs = closedMonotonicNs
        self.clockStepSeconds = clockStepSeconds
    }
}
