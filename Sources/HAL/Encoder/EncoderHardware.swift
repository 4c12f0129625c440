internal import CShims
internal import CV4L2
internal import Glibc

/// What an FFmpeg hardware encoder needs from the machine before it can open, found the way the
/// kernel lays it out, so an encoder whose hardware is absent is passed over with one plain reason
/// (and FFmpeg is not asked, which would print its own errors for every missing device).
///
/// - `*_vaapi`: a DRM render node (`/sys/class/drm/renderD*`, opened as `/dev/dri/renderD*`).
/// - `*_v4l2m2m`: a V4L2 memory-to-memory device whose capture queue makes that codec
///   (`/sys/class/video4linux/video*`, asked with `VIDIOC_QUERYCAP` and `VIDIOC_ENUM_FMT`), as
///   FFmpeg itself scans `/dev/video*` for one; a Raspberry Pi 4's is `bcm2835-codec-encode`.
/// - `*_nvenc`: NVIDIA's driver (`/dev/nvidiactl`).
public struct EncoderHardware: Sendable {
    /// What a V4L2 device says of itself: its name, whether it is memory-to-memory, and the
    /// compressed formats its capture queue makes.
    public struct VideoDevice: Sendable, Equatable {
        public var node: String
        public var name: String
        public var memoryToMemory: Bool
        public var makes: Set<VideoCodec>

        public init(node: String, name: String, memoryToMemory: Bool, makes: Set<VideoCodec>) {
            self.node = node
            self.name = name
            self.memoryToMemory = memoryToMemory
            self.makes = makes
        }
    }

    /// Where sysfs and the device nodes are (a test lays them out in a folder).
    public var sysfs: String
    public var dev: String
    /// Asks a V4L2 device node what it is (`VIDIOC_QUERYCAP`, `VIDIOC_ENUM_FMT`); nil: it does not answer.
    public var askVideoDevice: @Sendable (_ node: String, _ name: String) -> VideoDevice?

    public init(
        sysfs: String = "/sys", dev: String = "/dev",
        askVideoDevice: @escaping @Sendable (_ node: String, _ name: String) -> VideoDevice? = EncoderHardware.ask
    ) {
        self.sysfs = sysfs
        self.dev = dev
        self.askVideoDevice = askVideoDevice
    }

    public static let system = EncoderHardware()

    /// Why `encoder` cannot open on this machine, or nil when its hardware is there (or it needs none).
    public func missing(for encoder: String, codec: VideoCodec) -> String? {
        if encoder.hasSuffix("_vaapi") {
            return renderNode() == nil ? "no VAAPI device: no DRM render node in \(sysfs)/class/drm (a GPU's /dev/dri/renderD*)" : nil
        }
        if encoder.hasSuffix("_v4l2m2m") {
            let devices = videoDevices()
            if devices.contains(where: { $0.memoryToMemory && $0.makes.contains(codec) }) { return nil }
            let seen = devices.isEmpty ? "no V4L2 devices" : devices.map { "\($0.node) \($0.name)" }.joined(separator: ", ")
            return "no V4L2 memory-to-memory \(codec.displayName) encoder (\(seen))"
        }
        if encoder.hasSuffix("_nvenc") {
            return exists("\(dev)/nvidiactl") ? nil : "no NVIDIA driver (\(dev)/nvidiactl)"
        }
        if encoder.hasSuffix("_qsv") || encoder.hasSuffix("_omx") {
            return "not supported by this agent"
        }
        return nil
    }

    /// The first DRM render node (`/dev/dri/renderD128` on a machine with one GPU).
    public func renderNode() -> String? {
        entries(of: "\(sysfs)/class/drm").filter { $0.hasPrefix("renderD") }.sorted().first.map { "\(dev)/dri/\($0)" }
    }

    /// Every V4L2 device the kernel lists, with what it says of itself, in number order.
    public func videoDevices() -> [VideoDevice] {
        let root = "\(sysfs)/class/video4linux"
        let names = entries(of: root).filter { $0.hasPrefix("video") && Int($0.dropFirst(5)) != nil }
            .sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
        return names.compactMap { entry in
            let name = read("\(root)/\(entry)/name") ?? entry
            return askVideoDevice("\(dev)/\(entry)", name)
        }
    }

    private func entries(of folder: String) -> [String] {
        guard let directory = opendir(folder) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    private func read(_ path: String) -> String? {
        let fd = Glibc.open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: " \n")
    }

    private func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// The kernel's answer: `VIDIOC_QUERYCAP` for memory-to-memory, `VIDIOC_ENUM_FMT` on the capture
    /// queue for what it makes. Opened read-only and non-blocking, without libv4l2.
    public static let ask: @Sendable (String, String) -> VideoDevice? = { node, name in
        let fd = Glibc.open(node, O_RDWR | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var caps = v4l2_capability()
        guard dashcam_ioctl(fd, dashcam_VIDIOC_QUERYCAP, &caps) == 0 else { return nil }
        let deviceCaps = caps.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? caps.device_caps : caps.capabilities
        let multiplanar = deviceCaps & UInt32(V4L2_CAP_VIDEO_M2M_MPLANE) != 0
        let m2m = multiplanar || deviceCaps & UInt32(V4L2_CAP_VIDEO_M2M) != 0
        var makes: Set<VideoCodec> = []
        if m2m {
            var index: UInt32 = 0
            while index < 64 {
                var description = v4l2_fmtdesc()
                description.index = index
                description.type = multiplanar ? V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE.rawValue : V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
                guard dashcam_ioctl(fd, dashcam_VIDIOC_ENUM_FMT, &description) == 0 else { break }
                if description.pixelformat == dashcam_V4L2_PIX_FMT_H264 { makes.insert(.h264) }
                if description.pixelformat == dashcam_V4L2_PIX_FMT_HEVC { makes.insert(.hevc) }
                index += 1
            }
        }
        return VideoDevice(node: node, name: name, memoryToMemory: m2m, makes: makes)
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var slice = Substring(self)
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
