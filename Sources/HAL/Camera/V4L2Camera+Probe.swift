internal import CV4L2
internal import CShims
internal import Glibc

/// What a V4L2 device offers, for `dashcam-agent probe`.
public struct V4L2DeviceInfo: Sendable, Codable {
    public struct Format: Sendable, Codable {
        public var fourcc: String
        public var description: String
        /// Made by libv4l2 from another format (e.g. YU12 from MJPEG).
        public var emulated: Bool
        public var sizes: [Size]
        /// A camera that takes any size within bounds (stepwise or continuous); `sizes` then holds the largest.
        public var range: SizeRange?
    }
    public struct SizeRange: Sendable, Codable {
        public var minWidth: Int
        public var maxWidth: Int
        public var minHeight: Int
        public var maxHeight: Int
    }
    public struct Size: Sendable, Codable {
        public var width: Int
        public var height: Int
        public var fps: [Double]

        public init(width: Int, height: Int, fps: [Double]) {
            self.width = width
            self.height = height
            self.fps = fps
        }
    }
    public var path: String
    public var card: String
    public var driver: String
    public var bus: String
    public var formats: [Format]
}

struct FormatEntry {
    var fourcc: UInt32
    var name: String
    var emulated: Bool
    var sizes: [(width: Int, height: Int)]
    /// A stepwise or continuous range covers any size inside it.
    var range: (minW: Int, maxW: Int, minH: Int, maxH: Int)?

    func offers(_ format: VideoFormat) -> Bool {
        if let range {
            return (range.minW...range.maxW).contains(format.width) && (range.minH...range.maxH).contains(format.height)
        }
        return sizes.contains { $0.width == format.width && $0.height == format.height }
    }
}

extension V4L2Camera {
    /// Describes the capture device at `path`; throws ``SourceError`` like ``open()``.
    public static func describe(_ path: String) throws -> V4L2DeviceInfo {
        try checkIsCaptureDevice(path)
        let fd = dashcam_v4l2_open(path, O_RDWR | O_NONBLOCK)
        guard fd >= 0 else { throw openError(path, errno) }
        defer { v4l2_close(fd) }
        var caps = v4l2_capability()
        _ = dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_QUERYCAP, &caps)
        let formats = Self.formats(fd: fd).map { entry in
            V4L2DeviceInfo.Format(
                fourcc: fourccString(entry.fourcc), description: entry.name, emulated: entry.emulated,
                sizes: sizes(fd: fd, fourcc: entry.fourcc),
                range: entry.range.map {
                    V4L2DeviceInfo.SizeRange(minWidth: $0.minW, maxWidth: $0.maxW, minHeight: $0.minH, maxHeight: $0.maxH)
                })
        }
        return V4L2DeviceInfo(
            path: path, card: cString(caps.card), driver: cString(caps.driver),
            bus: cString(caps.bus_info), formats: formats)
    }

    static func formats(fd: Int32) -> [FormatEntry] {
        var entries: [FormatEntry] = []
        var index: UInt32 = 0
        while true {
            var description = v4l2_fmtdesc()
            description.index = index
            description.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            guard dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_ENUM_FMT, &description) == 0 else { break }
            var entry = FormatEntry(
                fourcc: description.pixelformat, name: cString(description.description),
                emulated: description.flags & UInt32(V4L2_FMT_FLAG_EMULATED) != 0, sizes: [])
            var sizeIndex: UInt32 = 0
            while true {
                var size = v4l2_frmsizeenum()
                size.index = sizeIndex
                size.pixel_format = description.pixelformat
                guard dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_ENUM_FRAMESIZES, &size) == 0 else { break }
                if size.type == V4L2_FRMSIZE_TYPE_DISCRETE.rawValue {
                    entry.sizes.append((Int(size.discrete.width), Int(size.discrete.height)))
                } else {
                    let s = size.stepwise
                    entry.range = (Int(s.min_width), Int(s.max_width), Int(s.min_height), Int(s.max_height))
                    entry.sizes.append((Int(s.max_width), Int(s.max_height)))
                    break
                }
                sizeIndex += 1
            }
            entries.append(entry)
            index += 1
        }
        return entries
    }

    private static func sizes(fd: Int32, fourcc: UInt32) -> [V4L2DeviceInfo.Size] {
        let entry = formats(fd: fd).first { $0.fourcc == fourcc }
        return (entry?.sizes ?? []).map { size in
            var rates: [Double] = []
            var index: UInt32 = 0
            while true {
                var interval = v4l2_frmivalenum()
                interval.index = index
                interval.pixel_format = fourcc
                interval.width = UInt32(size.width)
                interval.height = UInt32(size.height)
                guard dashcam_v4l2_ioctl(fd, dashcam_VIDIOC_ENUM_FRAMEINTERVALS, &interval) == 0 else { break }
                if interval.type == V4L2_FRMIVAL_TYPE_DISCRETE.rawValue, interval.discrete.numerator > 0 {
                    rates.append(Double(interval.discrete.denominator) / Double(interval.discrete.numerator))
                } else {
                    let s = interval.stepwise
                    if s.min.numerator > 0, s.max.numerator > 0 {
                        rates.append(Double(s.max.denominator) / Double(s.max.numerator))
                        rates.append(Double(s.min.denominator) / Double(s.min.numerator))
                    }
                    break
                }
                index += 1
            }
            return V4L2DeviceInfo.Size(width: size.width, height: size.height, fps: rates)
        }
    }
}
