internal import CFFmpeg
internal import CShims
internal import Glibc

/// Decodes any video file FFmpeg reads, so a recorded drive can be replayed through the agent.
///
/// Frames are stamped with their presentation time on a monotonic timeline that starts when the
/// file opens, and paced in real time unless `realtime` is false.
public final class FileSource: FrameSource {
    public let name: String
    private let fps: Int
    private let realtime: Bool
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var decoder: UnsafeMutablePointer<AVCodecContext>?
    private var frame: UnsafeMutablePointer<AVFrame>? = av_frame_alloc()
    private var packet: UnsafeMutablePointer<AVPacket>? = av_packet_alloc()
    private var streamIndex: Int32 = -1
    private var timeBase = AVRational(num: 1, den: 1)
    private var start: UInt64 = 0
    private var firstPts: Int64?
    private var sequence: UInt64 = 0
    private var draining = false

    /// `fps` is the rate used for files that carry no timestamps.
    public init(path: String, fps: Int, realtime: Bool) {
        self.name = path
        self.fps = fps
        self.realtime = realtime
    }

    deinit {
        close()
        av_frame_free(&frame)
        av_packet_free(&packet)
    }

    public var pixelFormat: PixelFormat { PixelFormat(rawValue: decoder?.pointee.pix_fmt.rawValue ?? -1) }

    public func open() throws -> VideoFormat {
        close()
        var context: UnsafeMutablePointer<AVFormatContext>?
        var status = avformat_open_input(&context, name, nil, nil)
        guard status >= 0, let context else {
            if status == dashcam_averror(ENOENT) { throw SourceError.notFound(name) }
            throw SourceError.unreadable(name, averrorText(status))
        }
        format = context
        status = avformat_find_stream_info(context, nil)
        guard status >= 0 else { throw SourceError.unreadable(name, averrorText(status)) }
        var codec: UnsafePointer<AVCodec>?
        streamIndex = av_find_best_stream(context, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0)
        guard streamIndex >= 0, let codec, let stream = context.pointee.streams[Int(streamIndex)] else {
            throw SourceError.unreadable(name, "no video stream FFmpeg can decode")
        }
        decoder = avcodec_alloc_context3(codec)
        guard let decoder else { throw SourceError.unreadable(name, "out of memory") }
        avcodec_parameters_to_context(decoder, stream.pointee.codecpar)
        status = avcodec_open2(decoder, codec, nil)
        guard status >= 0 else { throw SourceError.unreadable(name, averrorText(status)) }
        timeBase = stream.pointee.time_base
        start = MonotonicClock.now()
        firstPts = nil
        sequence = 0
        draining = false
        return VideoFormat(width: Int(decoder.pointee.width), height: Int(decoder.pointee.height), fps: fps)
    }

    public func nextFrame() throws -> Frame? {
        guard let format, let decoder, let frame, let packet else { return nil }
        while true {
            let status = avcodec_receive_frame(decoder, frame)
            if status >= 0 { return stamp(frame) }
            if status == averrorEOF { return nil }
            guard status == averrorEAGAIN else { throw SourceError.unreadable(name, averrorText(status)) }
            if draining { return nil }
            let read = av_read_frame(format, packet)
            if read < 0 {
                // End of file (or a read error): let the decoder give up what it holds.
                draining = true
                avcodec_send_packet(decoder, nil)
                continue
            }
            defer { av_packet_unref(packet) }
            if packet.pointee.stream_index == streamIndex {
                let sent = avcodec_send_packet(decoder, packet)
                guard sent >= 0 || sent == averrorEAGAIN else { throw SourceError.unreadable(name, averrorText(sent)) }
            }
        }
    }

    public func close() {
        avcodec_free_context(&decoder)
        avformat_close_input(&format)
    }

    private func stamp(_ frame: UnsafeMutablePointer<AVFrame>) -> Frame {
        var pts = frame.pointee.best_effort_timestamp
        if pts == dashcam_av_nopts_value {
            pts = -1
        }
        let offset: UInt64
        if pts >= 0 {
            let first = firstPts ?? pts
            firstPts = first
            offset = UInt64(max(0, av_rescale_q(pts - first, timeBase, AVRational(num: 1, den: 1_000_000_000))))
        } else {
            offset = sequence * 1_000_000_000 / UInt64(fps)
        }
        let timestamp = start + offset
        if realtime { MonotonicClock.sleep(until: timestamp) }
        sequence += 1
        let data = frame.pointee.data, lines = frame.pointee.linesize
        return Frame(
            planes: (UnsafePointer(data.0), UnsafePointer(data.1), UnsafePointer(data.2), UnsafePointer(data.3)),
            strides: (lines.0, lines.1, lines.2, lines.3),
            pixelFormat: PixelFormat(rawValue: frame.pointee.format),
            width: Int(frame.pointee.width), height: Int(frame.pointee.height),
            timestamp: timestamp, sequence: sequence - 1
        )
    }
}
