import CSegmentVideo
public import Foundation
import NIOCore
import NIOPosix
public import RoadScene

/// A received segment's video, worked on with libavcodec (``CSegmentVideo``) on a thread pool of
/// its own, never on the cooperative one, and never on NIO's shared blocking pool (the SQLite
/// ledger's queries run there; a second of decoding and detection must not hold up a charge):
/// keyframes as JPEG, the whole clip as H.264, frames in gray. libavformat reads from a file, so
/// the segment is written to a private temporary file first.
public enum SegmentVideo {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// `count` frames spread evenly over the segment, first and last included, as JPEG at most
    /// `maxWidth` wide.
    public static func keyframeJPEGs(from segment: Data, count: Int, maxWidth: Int = 640) async throws -> [Data] {
        try await withFile(segment) { path in
            var buffers = [segment_video_buffer](repeating: .init(), count: max(1, min(count, 8)))
            var error = [CChar](repeating: 0, count: 256)
            let made = segment_video_keyframe_jpegs(path, Int32(buffers.count), Int32(maxWidth), &buffers, &error, error.count)
            guard made > 0 else { throw Failure(description: text(error)) }
            return (0..<Int(made)).map { i in
                defer { segment_video_free(&buffers[i]) }
                return Data(bytes: buffers[i].data, count: buffers[i].size)
            }
        }
    }

    /// The segment re-encoded as H.264 in MP4, frame for frame.
    public static func h264(from segment: Data) async throws -> Data {
        try await withFile(segment) { path in
            let output = path + ".h264.mp4"
            defer { unlink(output) }
            var error = [CChar](repeating: 0, count: 256)
            guard segment_video_transcode_h264(path, output, &error, error.count) > 0 else { throw Failure(description: text(error)) }
            return try Data(contentsOf: URL(fileURLWithPath: output))
        }
    }

    /// Every `every`-th frame (from the first) in gray, at most `maxWidth` wide.
    public static func grayFrames(from segment: Data, every: Int, maxWidth: Int) async throws -> [GrayFrame] {
        try await withFile(segment) { path in try grayFrames(path: path, every: every, maxWidth: maxWidth) }
    }

    /// The same from a file, on the calling thread (which it blocks while it decodes).
    public static func grayFrames(path: String, every: Int, maxWidth: Int) throws -> [GrayFrame] {
        final class Collected { var frames: [GrayFrame] = [] }
        let collected = Collected()
        var error = [CChar](repeating: 0, count: 256)
        let status = withExtendedLifetime(collected) {
            segment_video_gray_frames(path, Int32(max(1, every)), Int32(maxWidth), { context, gray, width, height, stride, index in
                guard let context, let gray else { return 1 }
                let collected = Unmanaged<Collected>.fromOpaque(context).takeUnretainedValue()
                collected.frames.append(GrayFrame(width: Int(width), height: Int(height), stride: Int(stride), rows: gray, index: Int(index)))
                return 0
            }, Unmanaged.passUnretained(collected).toOpaque(), &error, error.count)
        }
        guard status >= 0 else { throw Failure(description: text(error)) }
        return collected.frames
    }

    /// Runs `body` on the blocking pool with the segment in a temporary file (mode 0600), removed after.
    static func withFile<T: Sendable>(_ segment: Data, _ body: @escaping @Sendable (String) throws -> T) async throws -> T {
        _ = quiet
        return try await pool.runIfActive {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("segment-\(UUID().uuidString).mp4").path
            guard FileManager.default.createFile(atPath: path, contents: segment, attributes: [.posixPermissions: 0o600]) else {
                throw Failure(description: "cannot write the segment to \(path)")
            }
            defer { unlink(path) }
            return try body(path)
        }
    }

    private static let quiet: Void = segment_video_quiet()

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
