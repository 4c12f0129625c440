internal import CFFmpeg

/// A camera's MJPEG frames decoded with libavcodec (its `mjpeg` decoder) into planar YUV 4:2:0,
/// the format the encoders take without converting again: how a USB webcam's full-size stream,
/// which USB 2.0 carries only as MJPEG, reaches the evidence encoder.
///
/// One decoded picture at a time, reused; a frame the decoder refuses (a webcam's torn JPEG) is
/// counted and skipped by the caller, never passed on half made.
public final class MJPEGDecoder {
    public let width: Int
    public let height: Int
    /// Frames the decoder refused, and the last reason.
    public private(set) var refused = 0
    public private(set) var lastProblem: String?
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let packet: UnsafeMutablePointer<AVPacket>
    private let decoded: UnsafeMutablePointer<AVFrame>
    private let output: UnsafeMutablePointer<AVFrame>
    private var scaler: OpaquePointer?

    /// A decoder for `width` x `height` JPEGs (what the camera negotiated); its frames are `yuv420p`.
    public init(width: Int, height: Int) throws {
        guard let codec = avcodec_find_decoder(AV_CODEC_ID_MJPEG), let context = avcodec_alloc_context3(codec) else {
            throw SourceError.unsupported("mjpeg", "this FFmpeg has no MJPEG decoder")
        }
        self.context = context
        self.width = width
        self.height = height
        packet = av_packet_alloc()
        decoded = av_frame_alloc()
        output = av_frame_alloc()
        output.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        output.pointee.width = Int32(width)
        output.pointee.height = Int32(height)
        var status = av_frame_get_buffer(output, 0)
        if status >= 0 { status = avcodec_open2(context, codec, nil) }
        guard status >= 0 else {
            free()
            throw SourceError.unsupported("mjpeg", "the MJPEG decoder does not open: \(averrorText(status))")
        }
    }

    deinit { free() }

    private func free() {
        avcodec_free_context(&context)
        var packet: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&packet)
        var decoded: UnsafeMutablePointer<AVFrame>? = decoded
        av_frame_free(&decoded)
        var output: UnsafeMutablePointer<AVFrame>? = output
        av_frame_free(&output)
        sws_freeContext(scaler)
        scaler = nil
    }

    /// The JPEG in `bytes` as a `yuv420p` frame at the decoder's size, valid until the next call;
    /// nil when the decoder refuses it or it is not that size.
    public func decode(_ bytes: UnsafeRawBufferPointer, timestamp: UInt64, sequence: UInt64) -> Frame? {
        guard let context, let base = bytes.baseAddress, bytes.count > 0, bytes.count <= Int(Int32.max) else {
            return refuse("an empty buffer")
        }
        packet.pointee.data = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
        packet.pointee.size = Int32(bytes.count)
        defer {
            packet.pointee.data = nil
            packet.pointee.size = 0
        }
        var status = avcodec_send_packet(context, packet)
        guard status >= 0 else { return refuse(averrorText(status)) }
        status = avcodec_receive_frame(context, decoded)
        guard status >= 0 else { return refuse(averrorText(status)) }
        defer { av_frame_unref(decoded) }
        guard Int(decoded.pointee.width) == width, Int(decoded.pointee.height) == height else {
            return refuse("a \(decoded.pointee.width)x\(decoded.pointee.height) picture in a \(width)x\(height) stream")
        }
        // A webcam's JPEG is full-range 4:2:2 (yuvj422p) or 4:2:0: one conversion to the
        // encoders' yuv420p, the range kept as the picture has it.
        scaler = sws_getCachedContext(
            scaler, Int32(width), Int32(height), AVPixelFormat(rawValue: decoded.pointee.format),
            Int32(width), Int32(height), AV_PIX_FMT_YUV420P, SWS_BILINEAR, nil, nil, nil)
        guard let scaler else { return refuse("cannot convert \(PixelFormat(rawValue: decoded.pointee.format)) to yuv420p") }
        let (source, sourceStrides) = framePlanes(of: decoded)
        swsScale(scaler, planes: source, strides: sourceStrides, height: height, into: output)
        let (planes, strides) = framePlanes(of: output)
        return Frame(
            planes: planes, strides: strides, pixelFormat: .yuv420p, width: width, height: height,
            timestamp: timestamp, sequence: sequence)
    }

    private func refuse(_ reason: String) -> Frame? {
        refused += 1
        lastProblem = reason
        return nil
    }
}
