internal import CFFmpeg
internal import CShims
internal import Glibc

/// How the encoder spends bits.
public enum RateControl: Sendable, Equatable {
    /// Constant quality (x264/x265 CRF; lower is better; a hardware encoder gets its nearest kind).
    case crf(Int)
    /// Target bitrate with a VBV cap, all in kbit/s.
    case bitrate(kbps: Int, maxrateKbps: Int, bufsizeKbps: Int)
}

/// The codecs a segment may hold: the guidance stream (and a single stream) is HEVC; evidence
/// may be H.264 where that is what the board encodes in real time.
public enum VideoCodec: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case hevc, h264

    init?(_ id: AVCodecID) {
        switch id {
        case AV_CODEC_ID_HEVC: self = .hevc
        case AV_CODEC_ID_H264: self = .h264
        default: return nil
        }
    }

    var av: AVCodecID { self == .hevc ? AV_CODEC_ID_HEVC : AV_CODEC_ID_H264 }
    /// The MP4 sample entry: parameter sets in the sample description only, as players expect.
    public var mp4Tag: String { self == .hevc ? "hvc1" : "avc1" }
    public var displayName: String { self == .hevc ? "HEVC" : "H.264" }
    public var description: String { rawValue }
}

public struct EncoderSettings: Sendable, Equatable {
    /// FFmpeg encoder names, tried in order; the first that opens wins.
    public var preference: [String]
    public var rateControl: RateControl
    public var format: VideoFormat
    /// Frames per segment: every segment starts with an IDR and has no other keyframe.
    public var keyframeInterval: Int
    /// The codecs this stream may be encoded in; an encoder of another is passed over.
    public var codecs: Set<VideoCodec>

    public init(
        preference: [String], rateControl: RateControl, format: VideoFormat, keyframeInterval: Int,
        codecs: Set<VideoCodec> = [.hevc]
    ) {
        self.preference = preference
        self.rateControl = rateControl
        self.format = format
        self.keyframeInterval = keyframeInterval
        self.codecs = codecs
    }
}

public struct EncoderError: Error, CustomStringConvertible {
    /// Each encoder tried, with why it did not open.
    public let attempts: [(name: String, reason: String)]
    public let detail: String
    /// What the stream needed, for the message: "HEVC", "HEVC or H.264".
    public var wanted = "HEVC"

    public init(attempts: [(name: String, reason: String)], detail: String, wanted: String = "HEVC") {
        self.attempts = attempts
        self.detail = detail
        self.wanted = wanted
    }

    public var description: String {
        if attempts.isEmpty { return "encoder: \(detail)" }
        return "no \(wanted) encoder opens; tried " + attempts.map { "\($0.name) (\($0.reason))" }.joined(separator: ", ")
    }
}

/// libavcodec encoding, HEVC or H.264: the ``VideoEncoder`` of a real machine.
///
/// Frames are copied into one reused `AVFrame` (converted with libswscale only when the source's
/// pixel format or size is not what the encoder takes), and packets come out through one reused
/// `AVPacket` whose bytes are lent to the sink, not copied. A VAAPI encoder gets each frame
/// uploaded into a surface of its device's frames pool; a V4L2 memory-to-memory encoder gets
/// `yuv420p` in the few buffers a Raspberry Pi's `bcm2835-codec` can hold in its CMA memory.
public final class LibavEncoder: VideoEncoder {
    /// The FFmpeg encoder that opened, e.g. `libx265`.
    public let name: String
    /// Encoders tried before this one, with why they failed.
    public let skipped: [(name: String, reason: String)]
    public let inputFormat: PixelFormat
    public let codec: VideoCodec
    private let settings: EncoderSettings
    private let hardware: EncoderHardware
    /// The format frames are copied or scaled into (for VAAPI: before the upload).
    private let encoderFormat: AVPixelFormat
    private var opened: Opened
    private var frame: UnsafeMutablePointer<AVFrame>
    /// The VAAPI surface a frame is uploaded into; nil for encoders that take memory frames.
    private var surface: UnsafeMutablePointer<AVFrame>?
    private var packet: UnsafeMutablePointer<AVPacket>
    private var scaler: OpaquePointer?
    public private(set) var stream: EncodedStream

    /// Opens the first encoder in `settings.preference` that works; `inputFormat` is what the
    /// source delivers, taken as is when the encoder accepts it.
    public init(settings: EncoderSettings, inputFormat: PixelFormat, hardware: EncoderHardware = .system) throws {
        var failures: [(String, String)] = []
        var found: (String, Opened)?
        for name in settings.preference where found == nil {
            do throws(OpenFailure) {
                found = (name, try Self.open(name, settings: settings, input: inputFormat.av, hardware: hardware))
            } catch {
                failures.append((name, error.reason))
            }
        }
        guard let (name, opened) = found else {
            throw EncoderError(
                attempts: failures, detail: "",
                wanted: settings.codecs.sorted { $0.rawValue < $1.rawValue }.map(\.displayName).joined(separator: " or "))
        }
        self.name = name
        self.skipped = failures
        self.inputFormat = inputFormat
        self.settings = settings
        self.hardware = hardware
        self.codec = opened.codec
        self.encoderFormat = opened.memoryFormat
        self.opened = opened
        self.stream = Self.stream(of: opened, format: settings.format)
        self.frame = av_frame_alloc()
        self.packet = av_packet_alloc()
        if opened.context.pointee.hw_frames_ctx != nil { surface = av_frame_alloc() }
        try allocateFrame()
    }

    deinit {
        sws_freeContext(scaler)
        var frame: UnsafeMutablePointer<AVFrame>? = frame
        av_frame_free(&frame)
        var surface = surface
        av_frame_free(&surface)
        var packet: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&packet)
        opened.free()
    }

    /// The pixel format frames are handed over in; others go through libswscale.
    public var encoderPixelFormat: PixelFormat { PixelFormat(encoderFormat) }

    /// Encodes one frame at its timeline slot; `keyframe` forces an IDR (a segment starts).
    public func encode(_ source: Frame, slot: Int64, keyframe: Bool, into sink: PacketSink) throws {
        var status = av_frame_make_writable(frame)
        guard status >= 0 else { throw failure("make frame writable", status) }
        try copy(source)
        var sent = frame
        if let surface {
            av_frame_unref(surface)
            status = av_hwframe_get_buffer(opened.context.pointee.hw_frames_ctx, surface, 0)
            guard status >= 0 else { throw failure("get a VAAPI surface", status) }
            status = av_hwframe_transfer_data(surface, frame, 0)
            guard status >= 0 else { throw failure("upload to the VAAPI surface", status) }
            sent = surface
        }
        sent.pointee.pts = slot
        sent.pointee.pict_type = keyframe ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE
        status = avcodec_send_frame(opened.context, sent)
        guard status >= 0 else { throw failure("send frame", status) }
        try drain(into: sink)
    }

    /// Sends end-of-stream and hands over every packet still inside the encoder; then ``restart()``.
    public func flush(into sink: PacketSink) throws {
        let status = avcodec_send_frame(opened.context, nil)
        guard status >= 0 || status == averrorEOF else { throw failure("flush", status) }
        try drain(into: sink)
    }

    /// A flushed encoder takes no more frames: open a fresh context with the same settings.
    public func restart() throws {
        do {
            let fresh = try Self.open(name, settings: settings, input: inputFormat.av, hardware: hardware)
            opened.free()
            opened = fresh
            stream = Self.stream(of: fresh, format: settings.format)
        } catch {
            throw EncoderError(attempts: [(name, error.reason)], detail: "")
        }
    }

    private func drain(into sink: PacketSink) throws {
        while true {
            let status = avcodec_receive_packet(opened.context, packet)
            if status == averrorEAGAIN || status == averrorEOF { return }
            guard status >= 0 else { throw failure("receive packet", status) }
            defer { av_packet_unref(packet) }
            let received = packet.pointee
            try sink(
                EncodedPacket(
                    bytes: UnsafeRawBufferPointer(start: received.data, count: Int(received.size)),
                    pts: received.pts, dts: received.dts, duration: received.duration,
                    isKeyframe: received.flags & AV_PKT_FLAG_KEY != 0))
        }
    }

    /// The parameter sets the encoder put in `extradata` (it opens with a global header); an
    /// encoder that has none there sends them in band, and the muxer takes them from the first packet.
    private static func stream(of opened: Opened, format: VideoFormat) -> EncodedStream {
        let context = opened.context
        let extradata =
            context.pointee.extradata.map {
                Array(UnsafeBufferPointer(start: $0, count: Int(context.pointee.extradata_size)))
            } ?? []
        return EncodedStream(format: format, parameterSets: extradata, codec: opened.codec)
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
        swsScale(scaler, planes: source.planes, strides: source.strides, height: source.height, into: frame)
    }

    /// The source's planes and the encoder frame's planes as the C arrays FFmpeg takes.
    private func withPlanes(
        of source: Frame,
        _ body: (
            UnsafePointer<UnsafePointer<UInt8>?>, UnsafePointer<Int32>,
            UnsafePointer<UnsafeMutablePointer<UInt8>?>, UnsafePointer<Int32>
        ) -> Void
    ) {
        var planes = source.planes, strides = source.strides
        withUnsafeBytes(of: &planes) { planes in
            withUnsafeBytes(of: &strides) { strides in
                withUnsafeBytes(of: &frame.pointee.data) { dst in
                    withUnsafeBytes(of: &frame.pointee.linesize) { dstStrides in
                        body(
                            planes.assumingMemoryBound(to: UnsafePointer<UInt8>?.self).baseAddress!,
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

    /// An open encoder context and, for VAAPI, its device.
    private struct Opened {
        var context: UnsafeMutablePointer<AVCodecContext>
        var device: UnsafeMutablePointer<AVBufferRef>?
        var codec: VideoCodec
        /// The format of the frames handed over (VAAPI: the surfaces' software format).
        var memoryFormat: AVPixelFormat

        func free() {
            var context: UnsafeMutablePointer<AVCodecContext>? = context
            avcodec_free_context(&context)
            var device = device
            av_buffer_unref(&device)
        }
    }

    private static func open(_ name: String, settings: EncoderSettings, input: AVPixelFormat, hardware: EncoderHardware)
        throws(OpenFailure) -> Opened
    {
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw OpenFailure(reason: "not in this FFmpeg build")
        }
        guard let kind = VideoCodec(codec.pointee.id) else { throw OpenFailure(reason: "not an HEVC or H.264 encoder") }
        guard settings.codecs.contains(kind) else {
            throw OpenFailure(
                reason:
                    "an \(kind.displayName) encoder; this stream is \(settings.codecs.map(\.displayName).sorted().joined(separator: " or "))"
            )
        }
        if let missing = hardware.missing(for: name, codec: kind) { throw OpenFailure(reason: missing) }
        guard let context = avcodec_alloc_context3(codec) else { throw OpenFailure(reason: "out of memory") }
        var opened = Opened(context: context, device: nil, codec: kind, memoryFormat: choosePixelFormat(codec, input: input))
        let format = settings.format
        context.pointee.width = Int32(format.width)
        context.pointee.height = Int32(format.height)
        context.pointee.pix_fmt = opened.memoryFormat
        context.pointee.time_base = AVRational(num: 1, den: Int32(format.fps))
        context.pointee.framerate = AVRational(num: Int32(format.fps), den: 1)
        context.pointee.gop_size = Int32(settings.keyframeInterval)
        context.pointee.max_b_frames = 0
        // MP4 keeps parameter sets in the sample description (hvcC, avcC), not in-band.
        context.pointee.flags |= Int32(AV_CODEC_FLAG_GLOBAL_HEADER)
        let options = context.pointee.priv_data
        let keyint = settings.keyframeInterval
        switch settings.rateControl {
        case .crf(let crf):
            if name.hasPrefix("lib") {
                av_opt_set(options, "crf", String(crf), 0)
            } else if name.hasSuffix("_vaapi") {
                // Constant QP, the VAAPI drivers' constant-quality mode.
                av_opt_set(options, "rc_mode", "CQP", 0)
                context.pointee.global_quality = Int32(crf)
            } else if name.hasSuffix("_nvenc") {
                av_opt_set(options, "rc", "vbr", 0)
                av_opt_set(options, "cq", String(crf), 0)
            } else {
                // A mem2mem encoder knows only bitrates: the one CRF gives for this size and rate.
                context.pointee.bit_rate = Int64(Self.bitrateKbps(forCRF: crf, format: format, codec: kind)) * 1000
            }
        case .bitrate(let kbps, let maxrate, let bufsize):
            context.pointee.bit_rate = Int64(kbps) * 1000
            context.pointee.rc_max_rate = Int64(maxrate) * 1000
            context.pointee.rc_buffer_size = Int32(bufsize) * 1000
        }
        switch name {
        case "libx265":
            av_opt_set(options, "preset", "ultrafast", 0)
            av_opt_set(options, "tune", "zerolatency", 0)
            av_opt_set(
                options, "x265-params",
                "keyint=\(keyint):min-keyint=\(keyint):scenecut=0:open-gop=0:bframes=0:log-level=error", 0)
        case "libx264":
            av_opt_set(options, "preset", "ultrafast", 0)
            av_opt_set(options, "tune", "zerolatency", 0)
            av_opt_set(options, "x264-params", "keyint=\(keyint):min-keyint=\(keyint):scenecut=0:open-gop=0:bframes=0", 0)
        default:
            break
        }
        if name.hasSuffix("_v4l2m2m") {
            // bcm2835-codec takes YU12 (FFmpeg's yuv420p; not the full-range yuvj420p) and allocates
            // every buffer from CMA: FFmpeg's default of 16 output buffers at 1080p (3 MB each) is
            // more than a Pi 4's default CMA holds, so a few of each, enough for a frame in flight.
            opened.memoryFormat = AV_PIX_FMT_YUV420P
            context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            av_opt_set_int(options, "num_output_buffers", 6, 0)
            av_opt_set_int(options, "num_capture_buffers", 4, 0)
        }
        if name.hasSuffix("_vaapi") {
            do throws(OpenFailure) {
                try attachVAAPI(&opened, node: hardware.renderNode(), format: format)
            } catch {
                opened.free()
                throw error
            }
        }
        // Without it a forced I frame is a plain (non-IDR) I frame, and the segment would not
        // start cleanly. libx264, libx265, nvenc and others take it as an FFmpeg encoder option.
        av_opt_set(options, "forced-idr", "1", 0)
        let status = avcodec_open2(context, codec, nil)
        guard status >= 0 else {
            opened.free()
            throw OpenFailure(reason: averrorText(status))
        }
        return opened
    }

    /// A VAAPI encoder takes surfaces, not memory frames: a device on the render node and a
    /// frames pool of NV12 surfaces at the stream's size, which each frame is uploaded into.
    private static func attachVAAPI(_ opened: inout Opened, node: String?, format: VideoFormat) throws(OpenFailure) {
        guard let node else { throw OpenFailure(reason: "no VAAPI render node") }
        var device: UnsafeMutablePointer<AVBufferRef>?
        var status = av_hwdevice_ctx_create(&device, AV_HWDEVICE_TYPE_VAAPI, node, nil, 0)
        guard status >= 0, let device else { throw OpenFailure(reason: "VAAPI device \(node) does not open: \(averrorText(status))") }
        opened.device = device
        guard let frames = av_hwframe_ctx_alloc(device) else { throw OpenFailure(reason: "out of memory") }
        // The context keeps its own reference; this one goes when the pool is set up.
        defer { var ref: UnsafeMutablePointer<AVBufferRef>? = frames; av_buffer_unref(&ref) }
        let pool = frames.pointee.data.withMemoryRebound(to: AVHWFramesContext.self, capacity: 1) { $0 }
        pool.pointee.format = AV_PIX_FMT_VAAPI
        pool.pointee.sw_format = AV_PIX_FMT_NV12
        pool.pointee.width = Int32(format.width)
        pool.pointee.height = Int32(format.height)
        pool.pointee.initial_pool_size = 8
        status = av_hwframe_ctx_init(frames)
        guard status >= 0 else {
            throw OpenFailure(reason: "VAAPI surfaces at \(format.width)x\(format.height) on \(node): \(averrorText(status))")
        }
        opened.context.pointee.hw_frames_ctx = av_buffer_ref(frames)
        opened.context.pointee.pix_fmt = AV_PIX_FMT_VAAPI
        opened.memoryFormat = AV_PIX_FMT_NV12
    }

    /// What a bitrate-only encoder is given for a CRF: about what x264/x265 spend at that CRF on road
    /// footage, in bits per pixel per frame (0.1 at CRF 23 for H.264, halving every 6 steps; HEVC
    /// two thirds of it).
    public static func bitrateKbps(forCRF crf: Int, format: VideoFormat, codec: VideoCodec) -> Int {
        let bitsPerPixel = 0.1 * exp2(Double(23 - crf) / 6) * (codec == .hevc ? 2.0 / 3.0 : 1)
        return max(100, Int(Double(format.width * format.height * format.fps) * bitsPerPixel / 1000))
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
