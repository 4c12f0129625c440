import CSegmentVideo
public import Foundation
import NIOCore
import NIOPosix
import Synchronization
public import RoadScene

/// A received segment's video, worked on with libavcodec (``CSegmentVideo``) on a thread pool of
/// its own, never on the cooperative one, and never on NIO's shared blocking pool (the SQLite
/// ledger's queries run there; a second of decoding and detection must not hold up a charge):
/// keyframes as JPEG, the whole clip as H.264, frames in gray; and what the MP4 says of itself,
/// which the ingest reads before a charge (`Ingest/SegmentVideo+Inspect.swift`).
/// libavformat reads the segment from memory with its MP4 demuxer only: no other format is
/// probed and no protocol, file or URL can be opened from inside a segment.
public enum SegmentVideo {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// `count` frames spread evenly over the segment, first and last included, as JPEG at most
    /// `maxWidth` wide.
    public static func keyframeJPEGs(from segment: Data, count: Int, maxWidth: Int = 640) async throws -> [Data] {
        try await onPool(segment) { bytes in
            var buffers = [segment_video_buffer](repeating: .init(), count: max(1, min(count, 8)))
            var error = [CChar](repeating: 0, count: 256)
            let made = segment_video_keyframe_jpegs(
                bytes.baseAddress, bytes.count, Int32(buffers.count), Int32(clamping: maxWidth), &buffers, &error, error.count)
            guard made > 0 else { throw Failure(description: text(error)) }
            return (0..<Int(made)).map { i in
                defer { segment_video_free(&buffers[i]) }
                return Data(bytes: buffers[i].data, count: buffers[i].size)
            }
        }
    }

    /// The segment re-encoded as H.264 in MP4, frame for frame.
    public static func h264(from segment: Data) async throws -> Data {
        try await onPool(segment) { bytes in
            // The muxer writes to a file (its index goes at the end): a private one, removed after.
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("segment-\(UUID().uuidString).h264.mp4").path
            defer { unlink(output) }
            var error = [CChar](repeating: 0, count: 256)
            guard segment_video_transcode_h264(bytes.baseAddress, bytes.count, output, &error, error.count) > 0 else {
                throw Failure(description: text(error))
            }
            return try Data(contentsOf: URL(fileURLWithPath: output))
        }
    }

    /// Every `every`-th frame (from the first) in gray, at most `maxWidth` wide, and no more than
    /// `limit` of them (decoding stops there).
    public static func grayFrames(from segment: Data, every: Int, maxWidth: Int, limit: Int) async throws -> [GrayFrame] {
        try await onPool(segment) { bytes in try grayFrames(bytes, every: every, maxWidth: maxWidth, limit: limit) }
    }

    /// The same, on the calling thread (which it blocks while it decodes).
    public static func grayFrames(_ segment: UnsafeBufferPointer<UInt8>, every: Int, maxWidth: Int, limit: Int) throws -> [GrayFrame] {
        final class Collected {
            var frames: [GrayFrame] = []
            let limit: Int
            init(limit: Int) { self.limit = limit }
        }
        let collected = Collected(limit: max(1, limit))
        var error = [CChar](repeating: 0, count: 256)
        let status = withExtendedLifetime(collected) {
            segment_video_gray_frames(
                segment.baseAddress, segment.count, Int32(clamping: max(1, every)), Int32(clamping: maxWidth),
                { context, gray, width, height, stride, index in
                    guard let context, let gray else { return 1 }
                    let collected = Unmanaged<Collected>.fromOpaque(context).takeUnretainedValue()
                    collected.frames.append(
                        GrayFrame(width: Int(width), height: Int(height), stride: Int(stride), rows: gray, index: Int(index)))
                    return collected.frames.count >= collected.limit ? 1 : 0
                }, Unmanaged.passUnretained(collected).toOpaque(), &error, error.count)
        }
        guard status >= 0 else { throw Failure(description: text(error)) }
        return collected.frames
    }

    /// Runs `body` on the decode pool with the segment's bytes. Work still queued when its task
    /// is cancelled (the session ended) is dropped when its turn comes, not done for nobody.
    static func onPool<T: Sendable>(_ segment: Data, _ body: @escaping @Sendable (UnsafeBufferPointer<UInt8>) throws -> T) async throws -> T
    {
        let cancelled = Atomic<Bool>(false)
        return try await withTaskCancellationHandler {
            try await pool.runIfActive {
                guard !cancelled.load(ordering: .relaxed) else { throw CancellationError() }
                return try segment.withUnsafeBytes { raw in try body(raw.bindMemory(to: UInt8.self)) }
            }
        } onCancel: {
            cancelled.store(true, ordering: .relaxed)
        }
    }

    /// One thread per core, started on first use and kept for the life of the process.
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: System.coreCount)
        pool.start()
        return pool
    }()

    static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
