internal import CV4L2
internal import CShims
internal import Glibc
public import Logging

/// A V4L2 capture device read through libv4l2 with mmap streaming.
///
/// libv4l2 converts formats the encoder can't take to YU12 on the fly; MJPEG asked for by name
/// (`camera.pixelFormat: mjpeg`, a webcam's only full-size format over USB 2.0) is taken as the
/// camera sends it and decoded with libavcodec (``MJPEGDecoder``). Loss of the device
/// (`ENODEV`, `POLLERR`) and repeated poll timeouts surface as recoverable ``SourceError``s; the
/// caller closes and reopens.
public final class V4L2Camera: FrameSource {
    public struct Options: Sendable {
        public var device: String
        public var format: VideoFormat
        /// `auto`, `yuyv`, `nv12`, `yu12` or `mjpeg`.
        public var pixelFormat: String
        public var bufferCount: Int
        public var pollTimeoutMs: Int
        /// Poll timeouts in a row that make the camera "stalled".
        public var stallTimeouts: Int

        public init(
            device: String, format: VideoFormat, pixelFormat: String = "auto", bufferCount: Int = 4,
            pollTimeoutMs: Int = 1000, stallTimeouts: Int = 3
        ) {
            self.device = device
            self.format = format
            self.pixelFormat = pixelFormat
            self.bufferCount = bufferCount
            self.pollTimeoutMs = pollTimeoutMs
            self.stallTimeouts = stallTimeouts
        }
    }

    public var name: String { options.device }
    /// Frames the driver skipped, from gaps in the buffer sequence numbers.
    public private(set) var droppedFrames: UInt64 = 0
    /// What was negotiated, e.g. `YUYV 640x360@10`.
    public private(set) var negotiated = ""

    private let options: Options
    private let logger: Logger
    private var fd: Int32 = -1
    private var buffers: [UnsafeMutableRawBufferPointer] = []
    private var held: v4l2_buffer?
    public private(set) var pixelFormat = PixelFormat.yuyv422
    private var width = 0, height = 0, bytesPerLine = 0
    private var lastSequence: UInt32?
    private var streaming = false
    /// With MJPEG from the camera: its decoder, made at open for the negotiated size.
    private var jpeg: MJPEGDecoder?
    private var lastRefusalLog: UInt64 = 0

    public init(options: Options, logger: Logger) {
        self.options = options
        self.logger = logger
    }

    deinit { close() }

    public func open() throws -> VideoFormat {
        close()
        let path = options.device
        try Self.checkIsCaptureDevice(path)
        fd = dashcam_v4l2_open(path, O_RDWR | O_NONBLOCK)
        guard fd >= 0 else { throw Self.openError(path, errno) }
        do {
            let fourcc = try chooseFourcc()
            try setFormat(fourcc)
            let fps = try setFrameRate()
            try mapBuffers()
            negotiated = "\(fourccString(fourcc)) \(width)x\(height)@\(fps)"
            return VideoFormat(width: width, height: height, fps: fps)
        } catch {
            close()
            throw error
        }
    }

    public func nextFrame() throws -> Frame? {
        if !streaming {
            // Streaming starts at the first request, not at open: frames captured while the
            // caller was still setting up (an encoder opening) would overflow the ring and drop.
            var type = Int32(V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue)
            guard dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_STREAMON, &type) == 0 else {
                throw SourceError.lost(name, "VIDIOC_STREAMON: \(String(cString: strerror(errno)))")
            }
            streaming = true
        }
        if var buffer = held {
            held = nil
            _ = ioctl(dashcam_VIDIOC_QBUF, &buffer)
        }
        var timeouts = 0
        while true {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(options.pollTimeoutMs))
            if ready < 0 {
                if errno == EINTR { continue }
                throw SourceError.lost(name, "poll: \(String(cString: strerror(errno)))")
            }
            if ready == 0 {
                timeouts += 1
                if timeouts >= options.stallTimeouts {
                    throw SourceError.stalled(name, "no frame for \(timeouts * options.pollTimeoutMs) ms")
                }
                continue
            }
            if poller.revents & Int16(POLLERR | POLLHUP | POLLNVAL) != 0 {
                throw SourceError.lost(name, "device reported an error (poll revents \(poller.revents))")
            }
            var buffer = v4l2_buffer()
            buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            buffer.memory = V4L2_MEMORY_MMAP.rawValue
            guard ioctl(dashcam_VIDIOC_DQBUF, &buffer) == 0 else {
                if errno == EAGAIN || errno == EINTR { continue }
                throw SourceError.lost(name, "VIDIOC_DQBUF: \(String(cString: strerror(errno)))")
            }
            if buffer.flags & UInt32(V4L2_BUF_FLAG_ERROR) != 0 {
                _ = ioctl(dashcam_VIDIOC_QBUF, &buffer)
                continue
            }
            if let last = lastSequence, buffer.sequence > last &+ 1 {
                let gap = UInt64(buffer.sequence - last - 1)
                droppedFrames += gap
                logger.warning(
                    "camera: the driver dropped \(gap) frame(s) (sequence \(last) → \(buffer.sequence))",
                    metadata: ["device": "\(name)", "droppedTotal": "\(droppedFrames)"])
            }
            lastSequence = buffer.sequence
            held = buffer
            if let jpeg {
                let timestamp = Self.timestamp(of: buffer)
                let bytes = UnsafeRawBufferPointer(
                    rebasing: buffers[Int(buffer.index)][..<min(Int(buffer.bytesused), buffers[Int(buffer.index)].count)])
                if let frame = jpeg.decode(bytes, timestamp: timestamp, sequence: UInt64(buffer.sequence)) { return frame }
                // A torn JPEG: that frame is lost (a slot the segment counts as dropped), the next is taken.
                held = nil
                _ = ioctl(dashcam_VIDIOC_QBUF, &buffer)
                let now = MonotonicClock.now()
                if now &- lastRefusalLog > 60_000_000_000 || lastRefusalLog == 0 {
                    lastRefusalLog = now
                    logger.warning(
                        "camera: a JPEG frame did not decode: \(jpeg.lastProblem ?? "?")",
                        metadata: ["device": "\(name)", "refusedTotal": "\(jpeg.refused)"])
                }
                continue
            }
            return frame(from: buffer)
        }
    }

    public func close() {
        guard fd >= 0 else { return }
        var type = Int32(V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue)
        _ = dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_STREAMOFF, &type)
        for buffer in buffers { v4l2_munmap(buffer.baseAddress, buffer.count) }
        buffers.removeAll()
        jpeg = nil
        held = nil
        lastSequence = nil
        streaming = false
        v4l2_close(fd)
        fd = -1
    }

    // MARK: - Opening

    static func openError(_ path: String, _ code: Int32) -> SourceError {
        switch code {
        case ENOENT, ENODEV, ENXIO: .notFound(path)
        case EACCES, EPERM: .unsupported(path, "permission denied (is the user in the 'video' group?)")
        default: .unsupported(path, "cannot open: \(String(cString: strerror(code)))")
        }
    }

    /// Asks the kernel directly whether `path` is a streaming capture device, so a wrong path
    /// gets one clear error (libv4l2 would print its own complaints first).
    static func checkIsCaptureDevice(_ path: String) throws {
        let fd = Glibc.open(path, O_RDWR | O_NONBLOCK)
        guard fd >= 0 else { throw openError(path, errno) }
        defer { Glibc.close(fd) }
        var caps = v4l2_capability()
        guard dashcam_ioctl(fd, dashcam_VIDIOC_QUERYCAP, &caps) == 0 else {
            throw SourceError.notACaptureDevice(path, "VIDIOC_QUERYCAP: \(String(cString: strerror(errno)))")
        }
        let flags = caps.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? caps.device_caps : caps.capabilities
        guard flags & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0 else {
            throw SourceError.notACaptureDevice(path, "\(cString(caps.card)) has no video capture")
        }
        guard flags & UInt32(V4L2_CAP_STREAMING) != 0 else {
            throw SourceError.notACaptureDevice(path, "\(cString(caps.card)) does not support streaming I/O")
        }
    }

    /// YUYV, NV12 or YU12 at the asked size if the camera has it; else YU12 converted by libv4l2
    /// (from MJPEG, say); else whatever comes first.
    private func chooseFourcc() throws -> UInt32 {
        let formats = Self.formats(fd: fd)
        guard !formats.isEmpty else { throw SourceError.unsupported(name, "the device lists no capture formats") }
        let wanted = VideoFormat(width: options.format.width, height: options.format.height, fps: options.format.fps)
        if let forced = Self.fourcc(named: options.pixelFormat) {
            if formats.contains(where: { $0.fourcc == forced }) { return forced }
            logger.warning(
                "camera: \(name) has no \(options.pixelFormat); choosing another", metadata: ["offered": "\(formats.map(\.name))"])
        }
        let native = [dashcam_V4L2_PIX_FMT_YUYV, dashcam_V4L2_PIX_FMT_NV12, dashcam_V4L2_PIX_FMT_YUV420]
        for fourcc in native {
            if let format = formats.first(where: { $0.fourcc == fourcc && !$0.emulated }), format.offers(wanted) {
                return fourcc
            }
        }
        if formats.contains(where: { $0.fourcc == dashcam_V4L2_PIX_FMT_YUV420 && $0.emulated }) {
            return dashcam_V4L2_PIX_FMT_YUV420
        }
        return formats.first { native.contains($0.fourcc) }?.fourcc ?? dashcam_V4L2_PIX_FMT_YUV420
    }

    private func setFormat(_ fourcc: UInt32) throws {
        var format = v4l2_format()
        format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        format.fmt.pix.width = UInt32(options.format.width)
        format.fmt.pix.height = UInt32(options.format.height)
        format.fmt.pix.pixelformat = fourcc
        format.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        guard ioctl(dashcam_VIDIOC_S_FMT, &format) == 0 else {
            throw SourceError.unsupported(name, "VIDIOC_S_FMT \(fourccString(fourcc)): \(String(cString: strerror(errno)))")
        }
        let given = format.fmt.pix
        if given.pixelformat == dashcam_V4L2_PIX_FMT_MJPEG || given.pixelformat == dashcam_V4L2_PIX_FMT_JPEG {
            width = Int(given.width)
            height = Int(given.height)
            jpeg = try MJPEGDecoder(width: width, height: height)
            pixelFormat = .yuv420p
            bytesPerLine = width
            return
        }
        guard let pixelFormat = Self.pixelFormat(fourcc: given.pixelformat) else {
            throw SourceError.unsupported(name, "the driver chose \(fourccString(given.pixelformat)), which the agent cannot read")
        }
        self.pixelFormat = pixelFormat
        width = Int(given.width)
        height = Int(given.height)
        bytesPerLine = Int(given.bytesperline)
        if width != options.format.width || height != options.format.height {
            logger.warning(
                "camera: asked for \(options.format.width)x\(options.format.height), the device gives \(width)x\(height)",
                metadata: ["device": "\(name)"])
        }
    }

    private func setFrameRate() throws -> Int {
        var parm = v4l2_streamparm()
        parm.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        parm.parm.capture.timeperframe = v4l2_fract(numerator: 1, denominator: UInt32(options.format.fps))
        if ioctl(dashcam_VIDIOC_S_PARM, &parm) != 0 {
            logger.warning("camera: \(name) does not take a frame rate (VIDIOC_S_PARM: \(String(cString: strerror(errno))))")
        }
        var current = v4l2_streamparm()
        current.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        guard ioctl(dashcam_VIDIOC_G_PARM, &current) == 0 else { return options.format.fps }
        let interval = current.parm.capture.timeperframe
        guard interval.numerator > 0 else { return options.format.fps }
        let given = Int((Double(interval.denominator) / Double(interval.numerator)).rounded())
        if given != options.format.fps {
            logger.warning("camera: asked for \(options.format.fps) fps, the device gives \(given) fps", metadata: ["device": "\(name)"])
        }
        return max(1, given)
    }

    private func mapBuffers() throws {
        var request = v4l2_requestbuffers()
        request.count = UInt32(options.bufferCount)
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        guard ioctl(dashcam_VIDIOC_REQBUFS, &request) == 0, request.count > 0 else {
            throw SourceError.unsupported(name, "VIDIOC_REQBUFS: \(String(cString: strerror(errno)))")
        }
        for index in 0..<request.count {
            var buffer = v4l2_buffer()
            buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            buffer.memory = V4L2_MEMORY_MMAP.rawValue
            buffer.index = index
            guard ioctl(dashcam_VIDIOC_QUERYBUF, &buffer) == 0 else {
                throw SourceError.unsupported(name, "VIDIOC_QUERYBUF: \(String(cString: strerror(errno)))")
            }
            let length = Int(buffer.length)
            guard let base = v4l2_mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, Int64(buffer.m.offset)),
                base != MAP_FAILED
            else {
                throw SourceError.unsupported(name, "mmap: \(String(cString: strerror(errno)))")
            }
            buffers.append(UnsafeMutableRawBufferPointer(start: base, count: length))
            guard ioctl(dashcam_VIDIOC_QBUF, &buffer) == 0 else {
                throw SourceError.unsupported(name, "VIDIOC_QBUF: \(String(cString: strerror(errno)))")
            }
        }
    }

    // MARK: - Frames

    private func frame(from buffer: v4l2_buffer) -> Frame {
        let base = UnsafePointer<UInt8>(buffers[Int(buffer.index)].baseAddress!.assumingMemoryBound(to: UInt8.self))
        let stride = bytesPerLine
        let planes: Frame.Planes
        let strides: Frame.Strides
        switch pixelFormat {
        case .nv12:
            planes = (base, base + stride * height, nil, nil)
            strides = (Int32(stride), Int32(stride), 0, 0)
        case .yuv420p:
            let u = base + stride * height
            planes = (base, u, u + (stride / 2) * (height / 2), nil)
            strides = (Int32(stride), Int32(stride / 2), Int32(stride / 2), 0)
        default:
            planes = (base, nil, nil, nil)
            strides = (Int32(stride), 0, 0, 0)
        }
        return Frame(
            planes: planes, strides: strides, pixelFormat: pixelFormat, width: width, height: height,
            timestamp: Self.timestamp(of: buffer), sequence: UInt64(buffer.sequence))
    }

    /// The driver's capture time when it is `CLOCK_MONOTONIC`, else the time it was taken here.
    private static func timestamp(of buffer: v4l2_buffer) -> UInt64 {
        let monotonic = buffer.flags & UInt32(V4L2_BUF_FLAG_TIMESTAMP_MASK) == UInt32(V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC)
        return monotonic
            ? UInt64(buffer.timestamp.tv_sec) * 1_000_000_000 + UInt64(buffer.timestamp.tv_usec) * 1000
            : MonotonicClock.now()
    }

    private func ioctl<T>(_ request: UInt, _ argument: inout T) -> Int32 {
        withUnsafeMutablePointer(to: &argument) { dashcam_v4l2_ioctl(fd, request, $0) }
    }

    static func pixelFormat(fourcc: UInt32) -> PixelFormat? {
        switch fourcc {
        case dashcam_V4L2_PIX_FMT_YUYV: .yuyv422
        case dashcam_V4L2_PIX_FMT_NV12: .nv12
        case dashcam_V4L2_PIX_FMT_YUV420: .yuv420p
        default: nil
        }
    }

    static func fourcc(named name: String) -> UInt32? {
        switch name.lowercased() {
        case "yuyv": dashcam_V4L2_PIX_FMT_YUYV
        case "nv12": dashcam_V4L2_PIX_FMT_NV12
        case "yu12": dashcam_V4L2_PIX_FMT_YUV420
        // MJPEG as the camera sends it, decoded by libavcodec (MJPEGDecoder); a camera without it
        // gets the other formats' route.
        case "mjpeg": dashcam_V4L2_PIX_FMT_MJPEG
        default: nil
        }
    }
}

func fourccString(_ code: UInt32) -> String {
    String(decoding: (0..<4).map { UInt8(truncatingIfNeeded: code >> ($0 * 8)) }, as: UTF8.self)
}

func cString<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
}
