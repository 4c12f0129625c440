import CSegmentVideo
import Foundation
import GuidanceServer
import RoadScene

/// A received segment's bytes, whatever they are, through the server's libavformat reader: the
/// input is the segment, decoded to gray frames as the vision analyzer asks for them.
enum Segments {
    static let every = 3
    static let maxWidth = 64
    /// One file, written again for each input: the reader takes a path.
    static let file = FileManager.default.temporaryDirectory.appendingPathComponent("guidance-fuzz-\(getpid()).mp4").path

    /// FFmpeg's log down to errors, as the server has it.
    static let quiet: Void = segment_video_quiet()

    static func run(_ input: UnsafeRawBufferPointer) {
        _ = quiet
        guard FileManager.default.createFile(atPath: file, contents: Data(input)) else { fatalError("cannot write \(file)") }
        guard let frames = try? SegmentVideo.grayFrames(path: file, every: every, maxWidth: maxWidth) else { return }
        var last = -1
        for frame in frames {
            require(frame.width >= 2 && frame.height >= 2 && frame.width % 2 == 0 && frame.height % 2 == 0, "a \(frame.width)x\(frame.height) frame")
            require(frame.width <= maxWidth, "a frame \(frame.width) wide, at most \(maxWidth) asked")
            require(frame.pixels.count == frame.width * frame.height, "pixels")
            require(frame.index > last && frame.index % every == 0, "frame \(frame.index) after \(last)")
            last = frame.index
        }
    }
}
