import Foundation
import GuidanceServer
import RoadScene

/// A received segment's bytes, whatever they are, read as the server reads them: its MP4 boxes
/// (``SegmentVideo/inspect(_:)``, from memory, MP4 only) and, when those read, its first frames
/// decoded to gray at full size, so that the frame size limit can be checked.
enum Segments {
    /// Frames decoded per input: enough to pass the decoder's first frame and reach the next.
    static let frames = 2
    static let maxSide = 4096

    static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = input.bindMemory(to: UInt8.self)
        guard let info = try? SegmentVideo.inspect(bytes) else { return }
        require(info.streams >= info.videoStreams && info.videoStreams >= 0, "\(info.streams) tracks, \(info.videoStreams) of video")
        require(info.frames >= 0 && info.durationMs >= 0, "frames \(info.frames), \(info.durationMs) ms")
        require(info.codec.utf8.count < 32, "codec name of \(info.codec.utf8.count) bytes")
        if info.videoStreams == 0 {
            require(info.codec.isEmpty && info.frames == 0 && info.durationMs == 0, "no video track, yet \(info)")
        }

        // maxWidth 0: frames at the size they decode to, which CSegmentVideo.h promises is at most 4096x4096.
        guard let decoded = try? SegmentVideo.grayFrames(bytes, every: 1, maxWidth: 0, limit: frames) else { return }
        require(decoded.count <= frames, "\(decoded.count) frames, \(frames) asked")
        var last = -1
        for frame in decoded {
            require(frame.width <= maxSide && frame.height <= maxSide, "a \(frame.width)x\(frame.height) frame decoded (\(info))")
            require(frame.pixels.count == frame.width * frame.height, "pixels")
            require(frame.index > last, "frame \(frame.index) after \(last)")
            last = frame.index
        }
    }
}
