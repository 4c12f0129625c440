import CFFmpeg
public import Foundation

/// Cuts the encoded stream into self-contained MP4 segments on the ``SegmentClock`` timeline.
///
/// Packets carry their frame slot as `pts`; a segment closes as soon as its last slot is written,
/// or, when that frame was dropped, when the first packet of the next segment arrives.
public final class Segmenter {
    public private(set) var clock: SegmentClock
    private let format: VideoFormat
    private let writer = MP4Writer()
    private var nextSeq: Int
    private var closed: [EncodedSegment] = []

    // The segment being written.
    private var segmentIndex: Int64 = -1
    private var firstPts: Int64 = 0
    private var lastPts: Int64 = 0
    private var frames = 0
    private var encoderName = ""
    private var codec: VideoCodec = .hevc
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC` when the timeline started, to date segments.
    private var wallOffset: Double = 0

    /// Where the car was over a wall-clock span, as ISO 6709 text for the MP4's location
    /// (`©xyz`), asked when a segment closes (on the capture thread: it must answer at once).
    public typealias Locate = @Sendable (_ from: Date, _ to: Date) -> String?
    private let locate: Locate?
    /// ``WallClock/offset()``, or a test's.
    private let currentOffset: @Sendable () -> Double
    /// The step found when the segment being written began, for its metadata.
    private var stepped: Double?

    public init(
        format: VideoFormat, segmentSeconds: Int, firstSeq: Int = 0, locate: Locate? = nil,
        wallOffset: @escaping @Sendable () -> Double = WallClock.offset
    ) {
        self.locate = locate
        self.currentOffset = wallOffset
        self.format = format
        self.clock = SegmentClock(fps: format.fps, segmentSeconds: segmentSeconds)
        self.nextSeq = firstSeq
    }

    /// The number the next segment gets.
    public var upcomingSeq: Int { nextSeq }

    /// Puts a frame on the timeline; `nil` means skip it.
    public func place(_ frame: Frame) -> SegmentClock.Placement? {
        if clock.anchor == nil {
            wallOffset = currentOffset()
        }
        return clock.place(timestamp: frame.timestamp)
    }

    /// Puts a frame on this timeline where another stream's segmenter placed it at `slot` of its
    /// `fps` (``SegmentClock/place(following:fps:timestamp:)``); `nil` means skip it.
    public func place(_ frame: Frame, following slot: Int64, fps: Int) -> SegmentClock.Placement? {
        if clock.anchor == nil {
            wallOffset = currentOffset()
        }
        return clock.place(following: slot, fps: fps, timestamp: frame.timestamp)
    }

    /// Starts a new timeline: the source reopened. Call after ``close(reason:)``.
    public func restartTimeline() { clock.restart() }

    /// Segments finished since the last call, oldest first.
    public func takeClosed() -> [EncodedSegment] {
        // Asked after every frame: nothing to hand over must not allocate.
        guard !closed.isEmpty else { return [] }
        defer { closed = [] }
        return closed
    }

    /// Closes the segment in progress early (after the encoder was flushed into this segmenter).
    public func close(reason: SegmentEndReason) throws {
        try finishSegment(reason: reason)
    }

    /// Takes one packet of `encoder`'s stream; closes the segment its slot completes.
    public func write(_ packet: EncodedPacket, from encoder: any VideoEncoder) throws {
        let pts = packet.pts
        let index = clock.segmentIndex(ofSlot: pts)
        if index != segmentIndex {
            if writer.isOpen { try finishSegment(reason: .complete) }
            // A wall clock that was stepped since (NTP after boot, a GPS fix) dates this segment
            // and the next by its new time: a new timeline, from a segment's start on.
            let offset = currentOffset()
            if abs(offset - wallOffset) > WallClock.stepThreshold {
                stepped = offset - wallOffset
                wallOffset = offset
            }
            try writer.begin(stream: encoder.stream, framesPerSegment: clock.framesPerSegment)
            segmentIndex = index
            firstPts = pts
            frames = 0
            encoderName = encoder.name
            codec = encoder.stream.codec
        }
        lastPts = pts
        frames += 1
        try writer.write(packet, pts: pts - firstPts, dts: packet.dts - firstPts)
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
        let startTime = clock.time(ofSlot: start)
        let capturedAt = Date(timeIntervalSince1970: Double(startTime) / 1e9 + wallOffset)
        let durationMs = Int((lastPts + 1 - firstPts) * 1000 / Int64(format.fps))
        let location = locate?(capturedAt, capturedAt.addingTimeInterval(Double(durationMs) / 1000))
        let bytes = try writer.finish(location: location)
        var metadata = SegmentMetadata(
            seq: nextSeq,
            capturedAt: capturedAt,
            captureStartMonotonicNs: startTime,
            durationMs: durationMs,
            frames: frames,
            droppedFrames: Int(span) - frames,
            bytes: bytes.count,
            sha256: sha256Hex(bytes),
            encoder: encoderName,
            width: format.width, height: format.height, fps: format.fps,
            complete: reason == .complete && frames == Int(n),
            endReason: reason
        )
        metadata.codec = codec
        closed.append(EncodedSegment(metadata: metadata, data: bytes, clockStepSeconds: stepped))
        stepped = nil
        nextSeq += 1
        segmentIndex = -1
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

/// SHA-256 of a segment, in lower-case hex, by libavutil (linked already for the encoder).
func sha256Hex(_ bytes: [UInt8]) -> String {
    let digest = SHA256Digest()
    digest.update(bytes)
    return digest.finish()
}

/// SHA-256 a piece at a time, by libavutil: a file is hashed without being read whole.
struct SHA256Digest: ~Copyable {
    private let context: OpaquePointer

    init() {
        guard let context = av_sha_alloc() else { preconditionFailure("av_sha_alloc: out of memory") }
        av_sha_init(context, 256)
        self.context = context
    }

    deinit { av_free(UnsafeMutableRawPointer(context)) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        av_sha_update(context, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
    }

    func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

    /// Lower-case hex of the digest.
    consuming func finish() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        av_sha_final(context, &digest)
        // Lower-case hex by table: `String(format:)` would go through Foundation's string formatting.
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest {
            text.append(hexDigits[Int(byte >> 4)])
            text.append(hexDigits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

public enum FileDigest {
    /// Lower-case hex SHA-256 of the file at `path` and its size, read a megabyte at a time.
    public static func sha256(ofFile path: String) throws(FileDigestError) -> (hex: String, bytes: Int) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw FileDigestError(path: path, code: errno) }
        defer { close(fd) }
        let digest = SHA256Digest()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var total = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw FileDigestError(path: path, code: errno)
            }
            if count == 0 { break }
            buffer.withUnsafeBytes { digest.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            total += count
        }
        return (digest.finish(), total)
    }
}

public struct FileDigestError: Error, CustomStringConvertible {
    public let path: String
    public let code: Int32
    public var description: String { "\(path): \(String(cString: strerror(code)))" }
}
