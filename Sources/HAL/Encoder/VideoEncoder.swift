/// One compressed frame as it leaves an encoder.
///
/// - Important: ``bytes`` are borrowed from the encoder and valid only while the ``PacketSink``
///   that receives the packet runs: a sink that keeps them must copy them. This is what keeps the
///   hot path free of a copy and an allocation per frame (the muxer copies them once, into the
///   segment).
public struct EncodedPacket {
    /// The packet's data as the encoder produced it (Annex B NAL units).
    public var bytes: UnsafeRawBufferPointer
    /// Presentation time in frame slots of the ``SegmentClock`` timeline.
    public var pts: Int64
    /// Decode time in frame slots; equal to `pts` without B-frames.
    public var dts: Int64
    /// Frame slots the packet spans (0: unknown, taken as 1).
    public var duration: Int64
    public var isKeyframe: Bool

    public init(bytes: UnsafeRawBufferPointer, pts: Int64, dts: Int64, duration: Int64 = 1, isKeyframe: Bool) {
        self.bytes = bytes
        self.pts = pts
        self.dts = dts
        self.duration = duration
        self.isKeyframe = isKeyframe
    }
}

/// Receives packets while the encoder still holds their bytes.
public typealias PacketSink = (EncodedPacket) throws -> Void

/// What a container needs to describe an encoded stream, independent of the encoder.
public struct EncodedStream: Sendable, Equatable {
    /// Size and rate; the time base is one tick per frame slot (`1/fps`).
    public var format: VideoFormat
    /// The parameter sets (HEVC: VPS, SPS, PPS; H.264: SPS, PPS) the stream needs, out of band:
    /// Annex B, or already an `hvcC`/`avcC` record (first byte 1), which goes into the MP4 sample
    /// description as it is. Empty: they come in band, and the muxer takes them from the first packet.
    public var parameterSets: [UInt8]
    public var codec: VideoCodec

    public init(format: VideoFormat, parameterSets: [UInt8], codec: VideoCodec = .hevc) {
        self.format = format
        self.parameterSets = parameterSets
        self.codec = codec
    }
}

/// Turns frames into HEVC or H.264 packets on the segment timeline.
///
/// Every frame is encoded at its slot; `keyframe` asks for an IDR, which starts a segment, and an
/// encoder puts no other keyframe in. Packets may come out later than their frame went in (an
/// encoder with lookahead): ``flush(into:)`` returns the rest.
public protocol VideoEncoder: AnyObject {
    /// The implementation in use, e.g. `libx265`; recorded in every segment's metadata.
    var name: String { get }
    /// The pixel format frames are encoded in; frames in another one are converted first.
    var encoderPixelFormat: PixelFormat { get }
    /// The stream its packets belong to; may change on ``restart()``.
    var stream: EncodedStream { get }

    /// Encodes one frame at its timeline slot and hands over the packets that are ready.
    func encode(_ frame: Frame, slot: Int64, keyframe: Bool, into sink: PacketSink) throws
    /// Ends the stream: hands over every packet still inside. Takes no more frames until ``restart()``.
    func flush(into sink: PacketSink) throws
    /// Starts a fresh stream with the same settings (after a flush).
    func restart() throws
}

extension VideoEncoder {
    /// Encodes one frame straight into `segmenter`.
    public func encode(_ frame: Frame, slot: Int64, keyframe: Bool, into segmenter: Segmenter) throws {
        try encode(frame, slot: slot, keyframe: keyframe) { try segmenter.write($0, from: self) }
    }

    /// Flushes the encoder into `segmenter`.
    public func flush(into segmenter: Segmenter) throws {
        try flush { try segmenter.write($0, from: self) }
    }
}
