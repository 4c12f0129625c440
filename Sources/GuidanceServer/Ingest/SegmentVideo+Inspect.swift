import CSegmentVideo
public import Foundation
import NIOCore
import NIOPosix

/// What a received segment's MP4 says of itself, read before it is charged: the ingest checks
/// its tracks, codec, frames and duration against the header (``StreamSession/StateMachine/judge(_:video:agent:)``).
/// Boxes only, never a decoded frame; from memory, with libavformat's MP4 demuxer alone.
extension SegmentVideo {
    /// What a segment's MP4 says of itself (``inspect(_:)``).
    public struct Info: Sendable, Equatable {
        /// Tracks of any kind, and of them video tracks.
        public var streams: Int
        public var videoStreams: Int
        /// FFmpeg's name of the first video track's codec: "hevc", "h264"; "" without one.
        public var codec: String
        public var width: Int
        public var height: Int
        /// Samples in the video track; 0 when the file does not say.
        public var frames: Int
        /// The video track's duration; 0 when the file does not say.
        public var durationMs: Int
    }

    /// Reads the MP4 boxes of `segment`, from memory and as MP4 only, without decoding a frame;
    /// on the calling thread (a few milliseconds for a segment).
    public static func inspect(_ segment: Data) throws -> Info {
        try segment.withUnsafeBytes { raw in try inspect(raw.bindMemory(to: UInt8.self)) }
    }

    public static func inspect(_ segment: UnsafeBufferPointer<UInt8>) throws -> Info {
        var info = segment_video_info()
        var error = [CChar](repeating: 0, count: 256)
        let status = segment_video_inspect(segment.baseAddress, segment.count, &info, &error, error.count)
        guard status >= 0 else { throw Failure(description: text(error)) }
        let codec = withUnsafeBytes(of: info.codec) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return Info(
            streams: Int(info.streams), videoStreams: Int(info.video_streams), codec: codec, width: Int(info.width),
            height: Int(info.height), frames: Int(clamping: info.frames), durationMs: Int(clamping: info.duration_ms))
    }

    /// What the MP4 says of itself (``inspect(_:)``), for a segment's `ack`, which waits for it.
    /// A segment of at most ``inPlaceBytes`` is read on the calling thread: its boxes take
    /// milliseconds at most, less than a trip to a pool thread and back, which on a busy core
    /// waits behind other sessions. A larger one is read on a pool of its own (not ``pool``, where
    /// it would queue behind other sessions' decoding): at the 8-MiB limit, an MP4 of 680 000
    /// one-frame samples took 24–27 ms to index.
    public static func inspectReceived(_ segment: Data) async throws -> Info {
        if segment.count <= inPlaceBytes { return try inspect(segment) }
        return try await inspectPool.runIfActive { try inspect(segment) }
    }

    /// The largest segment ``inspectReceived(_:)`` reads in place. An agent's 5-s segment at
    /// 640x360 is about 240 kB; a 1-MiB MP4 of 100 000 one-frame samples took 1.5–4.4 ms.
    static let inPlaceBytes = 1 << 20

    /// For ``inspectReceived(_:)``: reading boxes takes milliseconds, so one thread per core is
    /// plenty, and none of them ever decodes.
    static let inspectPool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: System.coreCount)
        pool.start()
        return pool
    }()
}
