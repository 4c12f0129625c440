/// One picture, borrowed from its source: the pointers stay valid only until the source's next
/// `nextFrame()` call, so consumers copy or encode it before asking for another.
public struct Frame {
    public typealias Planes = (UnsafePointer<UInt8>?, UnsafePointer<UInt8>?, UnsafePointer<UInt8>?, UnsafePointer<UInt8>?)
    public typealias Strides = (Int32, Int32, Int32, Int32)

    public var planes: Planes
    public var strides: Strides
    public var pixelFormat: PixelFormat
    public var width: Int
    public var height: Int
    /// Capture time on `CLOCK_MONOTONIC`, in nanoseconds.
    public var timestamp: UInt64
    /// The source's frame counter; a gap means the source dropped frames.
    public var sequence: UInt64

    public init(planes: Planes, strides: Strides, pixelFormat: PixelFormat, width: Int, height: Int, timestamp: UInt64, sequence: UInt64) {
        self.planes = planes
        self.strides = strides
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.timestamp = timestamp
        self.sequence = sequence
    }
}

/// The size and rate a source actually delivers after negotiation.
public struct VideoFormat: Sendable, Equatable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public var fps: Int
    public init(width: Int, height: Int, fps: Int) {
        self.width = width
        self.height = height
        self.fps = fps
    }
    public var description: String { "\(width)x\(height)@\(fps)" }
}
