internal import CFFmpeg

/// A frame copied out of its source's buffer, to keep after the source's next `nextFrame()`:
/// a parked car's pre-roll. The planes are libavutil's (`av_image_alloc`), freed with the copy.
public final class FrameCopy: @unchecked Sendable {
    private var data: [UnsafeMutablePointer<UInt8>?]
    private let linesizes: [Int32]
    private let template: Frame
    /// Bytes held.
    public let bytes: Int

    /// Copies `frame`; nil for a layout libavutil cannot size (a compressed format) or no memory.
    public init?(_ frame: Frame) {
        let format = frame.pixelFormat.av
        var data = [UnsafeMutablePointer<UInt8>?](repeating: nil, count: 4)
        var linesizes = [Int32](repeating: 0, count: 4)
        let size = av_image_alloc(&data, &linesizes, Int32(frame.width), Int32(frame.height), format, 32)
        guard size > 0 else { return nil }
        var source: [UnsafePointer<UInt8>?] = [frame.planes.0, frame.planes.1, frame.planes.2, frame.planes.3]
        var strides: [Int32] = [frame.strides.0, frame.strides.1, frame.strides.2, frame.strides.3]
        av_image_copy(&data, &linesizes, &source, &strides, format, Int32(frame.width), Int32(frame.height))
        self.data = data
        self.linesizes = linesizes
        self.template = frame
        bytes = Int(size)
    }

    deinit { av_free(data[0]) }

    /// The copy as a frame, with the original's time and sequence; valid while the copy lives.
    public var frame: Frame {
        var frame = template
        frame.planes = (UnsafePointer(data[0]), UnsafePointer(data[1]), UnsafePointer(data[2]), UnsafePointer(data[3]))
        frame.strides = (linesizes[0], linesizes[1], linesizes[2], linesizes[3])
        return frame
    }
}
