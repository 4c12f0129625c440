internal import CFFmpeg
internal import CShims

/// How the encoder spends bits.
public enum RateControl: Sendable, Equatable {
    /// Constant quality (x265 CRF; lower is better, 28 is x265's default).
    case crf(Int)
    /// Target bitrate with a VBV cap, all in kbit/s.
    case bitrate(kbps: Int, maxrateKbps: Int, bufsizeKbps: Int)
}

public struct EncoderSettings: Sendable, Equatable {
    /// FFmpeg encoder names, tried in order; the first that opens wins.
    public var preference: [String]
    public var rateControl: RateControl
    public var format: VideoFormat
    /// Frames per segment: every segment starts with an IDR and has no other keyframe.
    public var keyframeInterval: Int

    public init(preference: [String], rateControl: RateControl, format: VideoFormat, keyframeInterval: Int) {
        self.preference = preference
        self.rateControl = rateControl
        self.format = format
        self.keyframeInterval = keyframeInterval
    }
}

public struct EncoderError: Error, CustomStringConvertible {
    /// Each encoder tried, with why it did not open.
    public let attempts: [(name: String, reason: String)]
    public let detail: String

    public var description: String {
        if attempts.isEmpty { return "encoder: \(detail)" }
        return "no HEVC encoder opens; tried " + attempts.map { "\($0.name) (\($0.reason))" }.joined(separator: ", ")
    }
}

/// libavcodec HEVC encoding: the ``VideoEncoder`` of a real machine.
///
/// Frames are copied into one reused `AVFrame` (converted with libswscale only when the source's
/// pixel format is not one the encoder takes), and packets come out through one reused `AVPacket`
/// whose bytes are lent to the sink, not copied.
public final class HEVCEncoder: VideoEncoder {
    /// The FFmpeg encoder that opened, e.g. `libx265`.
    public let name: String
    /// Encoders tried before this one, with why they failed.
    public let skipped: [(name: String, reason: String)]
    public let inputFormat: PixelFormat
    private let settings: EncoderSettings
    private let codec: UnsafePointer<AVCodec>
    private let encoderFormat: AVPixelFormat
    private var context: UnsafeMutablePointer<AVCodecContext>
    private var frame: UnsafeMutablePointer<AVFrame>
    private var packet: UnsafeMutablePointer<AVPacket>
    private var scaler: OpaquePointer?
    public private(set) var stream: EncodedStream

    /// Opens the first encoder in `settings.preference` that works; `inputFormat` is what the
    /// source delivers, taken as is when the encoder accepts it.
    public init(settings: EncoderSettings, inputFormat: PixelFormat) throws {
        var failures: [(String, String)] = []
        var opened: (String, UnsafePointer<AVCodec>, AVPixelFormat, UnsafeMutablePointer<AVCodecContext>)?
        for name in settings.preference where opened == nil {
            do throws(OpenFailure) {
                let (codec, pixelFormat, context) = try Self.open(name, settings: settings, input: inputFormat.av)
                opened = (name, codec, pixelFormat, context)
            } catch {
                failures.append((name, error.reason))
            }
        }
        guard let (name, codec, pixelFormat, context) = opened else {
            throw EncoderError(attempts: failures, detail: "")
        }
        self.name = name
        self.skipped = failures
        self.inputFormat = inputFormat
        self.settings = settings
        self.codec = codec
        self.encoderFormat = pixelFormat
        self.context = context
        self.stream = Self.stream(of: context, format: settings.format)
        self.frame = av_frame_alloc()
        self.packet = av_packet_alloc()
        try allocateFrame()
    }

    deinit {
        sws_freeContext(scaler)
        var frame: UnsafeMutablePointer<AVFrame>? = frame
        av_frame_free(&frame)
        var packet: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&packet)
        var context: UnsafeMutablePointer<AVCodecContext>? = context
        avcodec_free_context(&context)
    }

    /// The pixel format the encoder takes; other frames go through libswscale.
    public var encoderPixelFormat: PixelFormat { PixelFormat(encoderFormat) }

    /// Encodes one frame at its timeline slot; `keyframe` forces an IDR (a segment starts).
    public func encode(_ source: Frame, slot: Int64, keyframe: Bool, into sink: PacketSink) throws {
        var status = av_frame_make_writable(frame)
        guard status >= 0 else { throw failure("make frame writable", status) }
        try copy(source)
        frame.pointee.pts = slot
        frame.pointee.pict_type = keyframe ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE
        status = avcodec_send_frame(context, frame)
        guard status >= 0 else { throw failure("send frame", status) }
        try drain(into: sink)
    }

    /// Sends end-of-stream and hands over every packet still inside the encoder; then ``restart()``.
    public func flush(into sink: PacketSink) throws {
        let status = avcodec_send_frame(context, nil)
        guard status >= 0 || status == averrorEOF else { throw failure("flush", status) }
        try drain(into: sink)
    }

    /// A flushed encoder takes no more frames: open a fresh context with the same settings.
    public func restart() throws {
        do {
            let (_, _, fresh) = try Self.open(name, settings: settings, input: inputFormat.av)
            var old: UnsafeMutablePointer<AVCodecContext>? = context
            avcodec_free_context(&old)
            context = fresh
            stream = Self.stream(of: fresh, format: settings.format)
        } catch {
            throw EncoderError(attempts: [(name, error.reason)], detail: "")
        }
    }

    private func drain(into sink: PacketSink) throws {
        while true {
            let status = avcodec_receive_packet(context, packet)
            if status == averrorEAGAIN || status == averrorEOF { return }
            guard status >= 0 else { throw failure("receive packet", status) }
            defer { av_packet_unref(packet) }
            let received = packet.pointee
            try sink(EncodedPacket(
                bytes: UnsafeRawBufferPointer(start: received.data, count: Int(received.size)),
                pts: received.pts, dts: received.dts, duration: received.duration,
                isKeyframe: received.flags & AV_PKT_FLAG_KEY != 0))
        }
    }

    /// The parameter sets the encoder put in `extradata` (it opens with a global header).
    private static func stream(of context: UnsafePointer<AVCodecContext>, format: VideoFormat) -> EncodedStream {
        let extradata = context.pointee.extradata.map {
            Array(UnsafeBufferPointer(start: $0, count: Int(context.pointee.extradata_size)))
        } ?? []
        return EncodedStream(format: format, parameterSets: extradata)
    }

    private func copy(_ source: Frame) throws {
        let width = settings.format.width, height = settings.format.height
        if source.pixelFormat.av == encoderFormat && source.width == width && source.height == height {
            let planeCount = Int(av_pix_fmt_count_planes(encoderFormat))
            let chromaShift = av_pix_fmt_desc_get(encoderFormat)!.pointee.log2_chroma_h
            withPlanes(of: source) { src, srcStrides, dst, dstStrides in
                for plane in 0..<planeCount {
                    let rows = plane == 1 || plane == 2 ? (height + (1 << chromaShift) - 1) >> chromaShift : height
                    av_image_copy_plane(
                        dst[plane], dstStrides[plane], src[plane], srcStrides[plane],
                        av_image_get_linesize(encoderFormat, Int32(width), Int32(plane)), Int32(rows))
                }
            }
            return
        }
        scaler = sws_getCachedContext(
            scaler, Int32(source.width), Int32(source.height), source.pixelFormat.av,
            Int32(width), Int32(height), encoderFormat, SWS_BILINEAR, nil, nil, nil)
        guard let scaler else {
            throw EncoderError(attempts: [], detail: "cannot convert \(source.pixelFormat) to \(PixelFormat(encoderFormat))")
        }
        withPlanes(of: source) { src, srcStrides, dst, dstStrides in
            _ = sws_scale(scaler, src, srcStrides, 0, Int32(source.height), dst, dstStrides)
        }
    }

    /// The source's planes and the encoder frame's planes as the C arrays FFmpeg takes.
    private func withPlanes(
        of source: Frame,
        _ body: (UnsafePointer<UnsafePointer<UInt8>?>, UnsafePointer<Int32>,
                 UnsafePointer<UnsafeMutablePointer<UInt8>?>, UnsafePointer<Int32>) -> Void
    ) {
        var planes = source.planes, strides = source.strides
        withUnsafeBytes(of: &planes) { planes in
            withUnsafeBytes(of: &strides) { strides in
                withUnsafeBytes(of: &frame.pointee.data) { dst in
                    withUnsafeBytes(of: &frame.pointee.linesize) { dstStrides in
                        body(planes.assumingMemoryBound(to: UnsafePointer<UInt8>?.self).baseAddress!,
                             strides.assumingMemoryBound(to: Int32.self).baseAddress!,
                             dst.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self).baseAddress!,
                             dstStrides.assumingMemoryBound(to: Int32.self).baseAddress!)
                    }
                }
            }
        }
    }

    private func allocateFrame() throws {
        frame.pointee.format = encoderFormat.rawValue
        frame.pointee.width = Int32(settings.format.width)
        frame.pointee.height = Int32(settings.format.height)
        let status = av_frame_get_buffer(frame, 0)
        guard status >= 0 else { throw failure("allocate frame", status) }
    }

    private func failure(_ step: String, _ code: Int32) -> EncoderError {
        EncoderError(attempts: [], detail: "\(name): \(step) failed: \(averrorText(code))")
    }

    private struct OpenFailure: Error { let reason: String }

    private static func open(_ name: String, settings: EncoderSettings, input: AVPixelFormat)
        throws(OpenFailure) -> (UnsafePointer<AVCodec>, AVPixelFormat, UnsafeMutablePointer<AVCodecContext>)
    {
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw OpenFailure(reason: "not in this FFmpeg build")
        }
        guard codec.pointee.id == AV_CODEC_ID_HEVC else { throw OpenFailure(reason: "not an HEVC encoder") }
        let pixelFormat = choosePixelFormat(codec, input: input)
        guard let context = avcodec_alloc_context3(codec) else { throw OpenFailure(reason: "out of memory") }
        let format = settings.format
        context.pointee.width = Int32(format.width)
        context.pointee.height = Int32(format.height)
        context.pointee.pix_fmt = pixelFormat
        context.pointee.time_base = AVRational(num: 1, den: Int32(format.fps))
        context.pointee.framerate = AVRational(num: Int32(format.fps), den: 1)
        context.pointee.gop_size = Int32(settings.keyframeInterval)
        context.pointee.max_b_frames = 0
        // MP4 keeps parameter sets in the sample description (hvcC), not in-band.
        context.pointee.flags |= Int32(AV_CODEC_FLAG_GLOBAL_HEADER)
        let options = context.pointee.priv_data
        switch settings.rateControl {
        case .crf(let crf):
            av_opt_set(options, "crf", String(crf), 0)
        case .bitrate(let kbps, let maxrate, let bufsize):
            context.pointee.bit_rate = Int64(kbps) * 1000
            context.pointee.rc_max_rate = Int64(maxrate) * 1000
            context.pointee.rc_buffer_size = Int32(bufsize) * 1000
        }
        if name == "libx265" {
            let keyint = settings.keyframeInterval
            av_opt_set(options, "preset", "ultrafast", 0)
            av_opt_set(options, "tune", "zerolatency", 0)
            av_opt_set(options, "x265-params",
                       "keyint=\(keyint):min-keyint=\(keyint):scenecut=0:open-gop=0:bframes=0:log-level=error", 0)
        }
        // Without it a forced I frame is a plain (non-IDR) I frame, and the segment would not
        // start cleanly. libx265, nvenc and others take it as an FFmpeg encoder option.
        av_opt_set(options, "forced-idr", "1", 0)
        let status = avcodec_open2(context, codec, nil)
        guard status >= 0 else {
            var context: UnsafeMutablePointer<AVCodecContext>? = context
            avcodec_free_context(&context)
            throw OpenFailure(reason: averrorText(status))
        }
        return (codec, pixelFormat, context)
    }

    /// The source's own format when the encoder takes it (no conversion), else the encoder's first.
    private static func choosePixelFormat(_ codec: UnsafePointer<AVCodec>, input: AVPixelFormat) -> AVPixelFormat {
        guard var format = cffmpeg_supported_pixel_formats(codec) else { return AV_PIX_FMT_YUV420P }
        let first = format.pointee
        while format.pointee != AV_PIX_FMT_NONE {
            if format.pointee == input { return input }
            format += 1
        }
        return first
    }
}
