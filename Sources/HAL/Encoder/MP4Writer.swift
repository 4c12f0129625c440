internal import CFFmpeg
internal import CShims
internal import Glibc

/// Muxes one segment into an MP4 held in memory.
///
/// The MP4 has its `moov` before `mdat` so a reader can start before the end: the muxer is told to
/// reserve room for `moov` at the front (`moov_size`) and seeks back to fill it when the segment
/// closes. (`+faststart` re-reads the file through its own I/O, which a memory buffer can't serve.)
final class MP4Writer {
    struct Failure: Error, CustomStringConvertible {
        let step: String
        let code: Int32
        var description: String { "MP4 \(step) failed: \(averrorText(code))" }
    }

    /// Bytes of the segment being written; capacity is kept between segments.
    private var storage = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    private var size = 0
    private var position = 0

    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var stream: UnsafeMutablePointer<AVStream>?
    /// Encoder time base (one tick per frame slot).
    private var sourceTimeBase = AVRational(num: 1, den: 1)

    deinit {
        abandon()
        storage.deallocate()
    }

    var isOpen: Bool { format != nil }

    func begin(codec: UnsafePointer<AVCodecContext>, framesPerSegment: Int) throws {
        abandon()
        size = 0
        position = 0
        var context: UnsafeMutablePointer<AVFormatContext>?
        var status = avformat_alloc_output_context2(&context, nil, "mp4", nil)
        guard status >= 0, let context else { throw Failure(step: "allocate muxer", code: status) }
        format = context

        let ioBufferSize: Int32 = 64 * 1024
        guard let ioBuffer = av_malloc(Int(ioBufferSize))?.assumingMemoryBound(to: UInt8.self),
              let io = avio_alloc_context(
                ioBuffer, ioBufferSize, 1, Unmanaged.passUnretained(self).toOpaque(), nil,
                { opaque, buffer, count in
                    let writer = Unmanaged<MP4Writer>.fromOpaque(opaque!).takeUnretainedValue()
                    return writer.append(UnsafeRawPointer(buffer!), Int(count))
                },
                { opaque, offset, whence in
                    let writer = Unmanaged<MP4Writer>.fromOpaque(opaque!).takeUnretainedValue()
                    return writer.seek(offset, whence)
                })
        else { throw Failure(step: "allocate I/O", code: dashcam_averror(ENOMEM)) }
        context.pointee.pb = io

        guard let stream = avformat_new_stream(context, nil) else {
            throw Failure(step: "add stream", code: dashcam_averror(ENOMEM))
        }
        self.stream = stream
        status = avcodec_parameters_from_context(stream.pointee.codecpar, codec)
        guard status >= 0 else { throw Failure(step: "copy codec parameters", code: status) }
        // `hvc1`: parameter sets live in the sample description only, as players expect in MP4.
        stream.pointee.codecpar.pointee.codec_tag = fourcc("hvc1")
        sourceTimeBase = codec.pointee.time_base
        stream.pointee.time_base = codec.pointee.time_base
        stream.pointee.avg_frame_rate = codec.pointee.framerate

        var options: OpaquePointer?
        defer { av_dict_free(&options) }
        // Room for moov: a fixed part plus sample tables (size, sync, chunk offset per frame).
        av_dict_set(&options, "moov_size", String(8192 + 32 * framesPerSegment), 0)
        status = avformat_write_header(context, &options)
        guard status >= 0 else { throw Failure(step: "write header", code: status) }
    }

    /// Writes one packet; `pts`/`dts` are in frame slots relative to the segment start.
    func write(_ packet: UnsafeMutablePointer<AVPacket>) throws {
        guard let format, let stream else { return }
        packet.pointee.stream_index = stream.pointee.index
        av_packet_rescale_ts(packet, sourceTimeBase, stream.pointee.time_base)
        let status = av_write_frame(format, packet)
        guard status >= 0 else { throw Failure(step: "write packet", code: status) }
    }

    /// Writes the trailer (and with it `moov`) and returns the finished file.
    func finish() throws -> [UInt8] {
        guard let format else { return [] }
        let status = av_write_trailer(format)
        avio_flush(format.pointee.pb)
        abandon()
        guard status >= 0 else { throw Failure(step: "write trailer", code: status) }
        return Array(UnsafeRawBufferPointer(rebasing: storage[0..<size]))
    }

    /// Frees the muxer without producing a file.
    func abandon() {
        guard let context = format else { return }
        if let pb = context.pointee.pb {
            var io: UnsafeMutablePointer<AVIOContext>? = pb
            av_freep(&pb.pointee.buffer)
            avio_context_free(&io)
            context.pointee.pb = nil
        }
        avformat_free_context(context)
        format = nil
        stream = nil
    }

    private func append(_ bytes: UnsafeRawPointer, _ count: Int) -> Int32 {
        let end = position + count
        if end > storage.count {
            // Grow by half: a segment's size varies little from one to the next.
            let grown = UnsafeMutableRawBufferPointer.allocate(byteCount: max(end, storage.count + storage.count / 2), alignment: 16)
            grown.copyMemory(from: UnsafeRawBufferPointer(rebasing: storage[0..<size]))
            storage.deallocate()
            storage = grown
        }
        (storage.baseAddress! + position).copyMemory(from: bytes, byteCount: count)
        position = end
        size = max(size, end)
        return Int32(count)
    }

    private func seek(_ offset: Int64, _ whence: Int32) -> Int64 {
        switch whence & ~AVSEEK_FORCE {
        case AVSEEK_SIZE: return Int64(size)
        case SEEK_SET: position = Int(offset)
        case SEEK_CUR: position += Int(offset)
        case SEEK_END: position = size + Int(offset)
        default: return Int64(dashcam_averror(EINVAL))
        }
        return Int64(position)
    }
}

func fourcc(_ code: String) -> UInt32 {
    code.utf8.reversed().reduce(0) { $0 << 8 | UInt32($1) }
}
