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

    /// The segment being written. ``finish()`` hands this array over as the segment's bytes, so a
    /// segment exists once in memory; the next one starts with room for the last one's size.
    private var storage: [UInt8] = []
    private var position = 0
    /// The last segment's size, to reserve for the next.
    private var expectedSize = 1 << 20

    /// Reused for every packet; it never owns the bytes it points at.
    private let packet: UnsafeMutablePointer<AVPacket> = av_packet_alloc()
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var stream: UnsafeMutablePointer<AVStream>?
    /// Encoder time base (one tick per frame slot).
    private var sourceTimeBase = AVRational(num: 1, den: 1)

    deinit {
        abandon()
        var packet: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&packet)
    }

    var isOpen: Bool { format != nil }

    func begin(stream description: EncodedStream, framesPerSegment: Int) throws {
        abandon()
        storage = []
        // A segment's size varies little from one to the next: an eighth more is rarely outgrown.
        storage.reserveCapacity(expectedSize + expectedSize / 8)
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
        let parameters = stream.pointee.codecpar!
        let format = description.format
        parameters.pointee.codec_type = AVMEDIA_TYPE_VIDEO
        parameters.pointee.codec_id = description.codec.av
        // `hvc1`/`avc1`: parameter sets live in the sample description only, as players expect in MP4.
        parameters.pointee.codec_tag = fourcc(description.codec.mp4Tag)
        parameters.pointee.width = Int32(format.width)
        parameters.pointee.height = Int32(format.height)
        let extradataSize = description.parameterSets.count
        if extradataSize > 0 {
            // The muxer frees it with the stream; libavcodec wants padding after it.
            guard let extradata = av_mallocz(extradataSize + Int(AV_INPUT_BUFFER_PADDING_SIZE)) else {
                throw Failure(step: "copy parameter sets", code: dashcam_averror(ENOMEM))
            }
            description.parameterSets.withUnsafeBytes { extradata.copyMemory(from: $0.baseAddress!, byteCount: extradataSize) }
            parameters.pointee.extradata = extradata.assumingMemoryBound(to: UInt8.self)
            parameters.pointee.extradata_size = Int32(extradataSize)
        }
        sourceTimeBase = AVRational(num: 1, den: Int32(format.fps))
        stream.pointee.time_base = sourceTimeBase
        stream.pointee.avg_frame_rate = AVRational(num: Int32(format.fps), den: 1)

        var options: OpaquePointer?
        defer { av_dict_free(&options) }
        // Room for moov: a fixed part plus sample tables (size, sync, chunk offset per frame).
        av_dict_set(&options, "moov_size", String(8192 + 32 * framesPerSegment), 0)
        status = avformat_write_header(context, &options)
        guard status >= 0 else { throw Failure(step: "write header", code: status) }
    }

    /// Writes one packet; `pts`/`dts` are in frame slots relative to the segment start.
    ///
    /// The bytes are lent to the muxer, not copied into a packet of its own: the muxer copies
    /// them once, into the segment.
    func write(_ encoded: EncodedPacket, pts: Int64, dts: Int64) throws {
        guard let format, let stream else { return }
        let packet = self.packet
        defer { av_packet_unref(packet) }
        packet.pointee.data = UnsafeMutablePointer(mutating: encoded.bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
        packet.pointee.size = Int32(encoded.bytes.count)
        packet.pointee.pts = pts
        packet.pointee.dts = dts
        packet.pointee.duration = max(encoded.duration, 1)
        packet.pointee.flags = encoded.isKeyframe ? AV_PKT_FLAG_KEY : 0
        packet.pointee.stream_index = stream.pointee.index
        av_packet_rescale_ts(packet, sourceTimeBase, stream.pointee.time_base)
        let status = av_write_frame(format, packet)
        guard status >= 0 else { throw Failure(step: "write packet", code: status) }
    }

    /// Writes the trailer (and with it `moov`) and returns the finished file.
    /// Writes `moov` and hands the MP4 over; `location` (ISO 6709) goes into it as the standard
    /// location (`udta/©xyz`, which ffprobe shows as `location`).
    func finish(location: String? = nil) throws -> [UInt8] {
        guard let format else { return [] }
        if let location { av_dict_set(&format.pointee.metadata, "location", location, 0) }
        let status = av_write_trailer(format)
        avio_flush(format.pointee.pb)
        abandon()
        guard status >= 0 else { throw Failure(step: "write trailer", code: status) }
        defer { storage = [] }
        expectedSize = storage.count
        return storage
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
        let source = UnsafeRawBufferPointer(start: bytes, count: count)
        // Seeking back (to fill in moov) overwrites; writing at the end appends.
        let overwrite = min(count, max(storage.count - position, 0))
        if overwrite > 0 {
            storage.withUnsafeMutableBytes {
                UnsafeMutableRawBufferPointer(rebasing: $0[position..<position + overwrite])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[0..<overwrite]))
            }
        }
        if overwrite < count {
            if position > storage.count { storage.append(contentsOf: repeatElement(0, count: position - storage.count)) }
            let end = position + count
            if end > storage.capacity {
                // Grow by half, not double: the segment is nearly done when it outgrows the estimate.
                storage.reserveCapacity(max(end, storage.capacity + storage.capacity / 2))
            }
            storage.append(contentsOf: UnsafeRawBufferPointer(rebasing: source[overwrite...]))
        }
        position += count
        return Int32(count)
    }

    private func seek(_ offset: Int64, _ whence: Int32) -> Int64 {
        switch whence & ~AVSEEK_FORCE {
        case AVSEEK_SIZE: return Int64(storage.count)
        case SEEK_SET: position = Int(offset)
        case SEEK_CUR: position += Int(offset)
        case SEEK_END: position = storage.count + Int(offset)
        default: return Int64(dashcam_averror(EINVAL))
        }
        return Int64(position)
    }
}

func fourcc(_ code: String) -> UInt32 {
    code.utf8.reversed().reduce(0) { $0 << 8 | UInt32($1) }
}
