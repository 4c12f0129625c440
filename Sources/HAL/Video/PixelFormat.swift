internal import CFFmpeg

/// A pixel layout, identified by FFmpeg's `AVPixelFormat` value so any decoder's output can be named.
public struct PixelFormat: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    init(_ format: AVPixelFormat) { self.rawValue = format.rawValue }
    var av: AVPixelFormat { AVPixelFormat(rawValue: rawValue) }

    public static let yuyv422 = PixelFormat(AV_PIX_FMT_YUYV422)
    public static let nv12 = PixelFormat(AV_PIX_FMT_NV12)
    public static let yuv420p = PixelFormat(AV_PIX_FMT_YUV420P)

    public var description: String {
        av_get_pix_fmt_name(av).map { String(cString: $0) } ?? "pixfmt(\(rawValue))"
    }
}
