/// A deterministic moving pattern made in process: no camera, no files.
///
/// Frame `n` is always the same picture (colour bars with a bar sweeping across and a luma
/// ramp that shifts each frame), so encoders see motion and tests can compare runs.
public final class TestPatternSource: FrameSource {
    public let name = "test-pattern"
    public let pixelFormat = PixelFormat.yuv420p
    private let format: VideoFormat
    private let realtime: Bool
    private var buffer = UnsafeMutableBufferPointer<UInt8>(start: nil, count: 0)
    private var index: UInt64 = 0
    private var start: UInt64 = 0

    public init(format: VideoFormat, realtime: Bool) {
        self.format = format
        self.realtime = realtime
    }

    deinit { buffer.deallocate() }

    public func open() throws -> VideoFormat {
        let lumaSize = format.width * format.height
        if buffer.count != lumaSize + lumaSize / 2 {
            buffer.deallocate()
            buffer = .allocate(capacity: lumaSize + lumaSize / 2)
        }
        index = 0
        start = MonotonicClock.now()
        return format
    }

    /// Frames a `realtime` pattern holds for a late reader, as a camera's capture buffers do.
    public static let heldFrames: UInt64 = 4

    public func nextFrame() throws -> Frame? {
        let period = 1_000_000_000 / UInt64(format.fps)
        if realtime {
            // A camera goes on at its rate whoever reads it: a reader more than its buffers behind
            // finds only the newest few, and the frames between are lost (a sequence gap, counted
            // as dropped), as a V4L2 driver drops a frame that has no free buffer. Without this a
            // slow machine got every frame, later and later, and the frames' times fell behind
            // the wall clock's.
            let now = MonotonicClock.now(), due = now > start ? (now - start) / period : 0
            if due > index + Self.heldFrames { index = due - Self.heldFrames }
        }
        let timestamp = start + index * period
        if realtime { MonotonicClock.sleep(until: timestamp) }
        draw(frame: Int(index))
        defer { index += 1 }
        let width = format.width, height = format.height
        let y = UnsafePointer(buffer.baseAddress!)
        return Frame(
            planes: (y, y + width * height, y + width * height + width * height / 4, nil),
            strides: (Int32(width), Int32(width / 2), Int32(width / 2), 0),
            pixelFormat: .yuv420p, width: width, height: height,
            timestamp: timestamp, sequence: index
        )
    }

    public func close() {}

    private func draw(frame n: Int) {
        let width = format.width, height = format.height
        let barX = (n * 8) % width
        let bytes = buffer
        do {
            for row in 0..<height {
                let line = row * width
                for col in 0..<width {
                    let bar = (col * 8 / width)
                    var luma = 16 + bar * 28 + ((row + n) & 31)
                    if abs(col - barX) < 6 { luma = 235 }
                    bytes[line + col] = UInt8(truncatingIfNeeded: luma)
                }
            }
            let chromaWidth = width / 2, chromaHeight = height / 2
            let uBase = width * height, vBase = uBase + chromaWidth * chromaHeight
            for row in 0..<chromaHeight {
                for col in 0..<chromaWidth {
                    let bar = col * 8 / chromaWidth
                    bytes[uBase + row * chromaWidth + col] = UInt8(truncatingIfNeeded: 64 + bar * 20)
                    bytes[vBase + row * chromaWidth + col] = UInt8(truncatingIfNeeded: 200 - bar * 18 + (n & 15))
                }
            }
        }
    }
}
