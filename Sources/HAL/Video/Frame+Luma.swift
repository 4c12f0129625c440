internal import CFFmpeg

/// Something that looks at frames as they are captured, on the capture thread. It must return at
/// once (copy what it keeps, hand the work to a thread of its own): the camera and the encoder
/// wait for it.
public protocol FrameTap: Sendable {
    func offer(_ frame: Frame)
}

/// A frame's brightness channel, packed and possibly scaled down.
public struct Luma: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var pixels: [UInt8]

    public init(width: Int, height: Int, pixels: [UInt8]) {
        self.width = width
        self.height = height
        self.pixels = pixels
    }
}

extension Frame {
    /// The luma (Y) plane copied out, every `factor`-th pixel of every `factor`-th row, with the
    /// smallest factor that makes the width at most `maxWidth`: no decode and no colour
    /// conversion, whatever the YUV layout (packed YUYV/UYVY, NV12, planar 4:2:0 or 4:2:2, gray).
    /// Nil for a layout without an 8-bit luma channel (RGB, 10-bit, a compressed format).
    ///
    /// Values are full range (black 0, white 255) like a gray image: cameras and decoders give
    /// video-range luma (16 to 235), which is stretched, except the JPEG (`yuvj`) layouts, which
    /// are full range already.
    public func luma(maxWidth: Int) -> Luma? {
        guard width > 0, height > 0, maxWidth > 0, let descriptor = av_pix_fmt_desc_get(pixelFormat.av)?.pointee else { return nil }
        let flags = descriptor.flags
        guard flags & UInt64(AV_PIX_FMT_FLAG_RGB) == 0, flags & UInt64(AV_PIX_FMT_FLAG_BITSTREAM) == 0,
            flags & UInt64(AV_PIX_FMT_FLAG_PAL) == 0, flags & UInt64(AV_PIX_FMT_FLAG_HWACCEL) == 0,
            descriptor.nb_components >= 1
        else { return nil }
        let y = descriptor.comp.0
        guard y.depth == 8, y.shift == 0, y.step >= 1 else { return nil }
        let plane: UnsafePointer<UInt8>? =
            switch y.plane {
            case 0: planes.0
            case 1: planes.1
            case 2: planes.2
            default: planes.3
            }
        let rowBytes: Int32 =
            switch y.plane {
            case 0: strides.0
            case 1: strides.1
            case 2: strides.2
            default: strides.3
            }
        let stride = Int(rowBytes)
        guard let plane, stride > 0 else { return nil }
        let factor = (width + maxWidth - 1) / maxWidth
        let outWidth = width / factor, outHeight = height / factor
        guard outWidth > 0, outHeight > 0 else { return nil }
        let step = Int(y.step) * factor, offset = Int(y.offset)
        let fullRange = Self.fullRangeFormats.contains(pixelFormat)
        var pixels = [UInt8](repeating: 0, count: outWidth * outHeight)
        pixels.withUnsafeMutableBufferPointer { out in
            Self.stretch.withUnsafeBufferPointer { stretch in
                for row in 0..<outHeight {
                    let source = plane + row * factor * stride + offset
                    let target = out.baseAddress! + row * outWidth
                    if fullRange {
                        for column in 0..<outWidth { target[column] = source[column * step] }
                    } else {
                        for column in 0..<outWidth { target[column] = stretch[Int(source[column * step])] }
                    }
                }
            }
        }
        return Luma(width: outWidth, height: outHeight, pixels: pixels)
    }

    static let fullRangeFormats: Set<PixelFormat> = [
        PixelFormat(AV_PIX_FMT_YUVJ420P), PixelFormat(AV_PIX_FMT_YUVJ422P), PixelFormat(AV_PIX_FMT_YUVJ444P),
        PixelFormat(AV_PIX_FMT_GRAY8)
    ]

    /// Video range 16…235 to full range 0…255.
    static let stretch: [UInt8] = (0...255).map { value in
        UInt8(max(0, min(255, ((value - 16) * 255 + 109) / 219)))
    }
}
