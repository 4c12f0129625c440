internal import CFFmpeg

/// Scales (and converts) frames into one reused buffer with libswscale: the guidance stream's
/// small frames, made once per frame it takes, for its encoder and the local road checks alike.
public final class FrameScaler {
    public let width: Int
    public let height: Int
    public let pixelFormat: PixelFormat
    private var context: OpaquePointer?
    private let output: UnsafeMutablePointer<AVFrame>

    public init(width: Int, height: Int, pixelFormat: PixelFormat) throws {
        self.width = width
        self.height = height
        self.pixelFormat = pixelFormat
        output = av_frame_alloc()
        output.pointee.format = pixelFormat.rawValue
        output.pointee.width = Int32(width)
        output.pointee.height = Int32(height)
        let status = av_frame_get_buffer(output, 0)
        guard status >= 0 else {
            var frame: UnsafeMutablePointer<AVFrame>? = output
            av_frame_free(&frame)
            throw EncoderError(attempts: [], detail: "scaler: cannot allocate \(width)x\(height) \(pixelFormat): \(averrorText(status))")
        }
    }

    deinit {
        sws_freeContext(context)
        var frame: UnsafeMutablePointer<AVFrame>? = output
        av_frame_free(&frame)
    }

    /// `frame` at this size and format, with its time and sequence; valid until the next call.
    public func scale(_ frame: Frame) throws -> Frame {
        context = sws_getCachedContext(
            context, Int32(frame.width), Int32(frame.height), frame.pixelFormat.av,
            Int32(width), Int32(height), pixelFormat.av, SWS_BILINEAR, nil, nil, nil)
        guard let context else {
            throw EncoderError(
                attempts: [],
                detail: "scaler: cannot convert \(frame.pixelFormat) \(frame.width)x\(frame.height) to \(pixelFormat) \(width)x\(height)")
        }
        swsScale(context, planes: frame.planes, strides: frame.strides, height: frame.height, into: output)
        let (planes, strides) = framePlanes(of: output)
        return Frame(
            planes: planes, strides: strides, pixelFormat: pixelFormat,
            width: width, height: height, timestamp: frame.timestamp, sequence: frame.sequence)
    }
}
