/// One picture in 8-bit gray, rows packed (`width` bytes apart): what the checks and the detector
/// look at. `index` is the frame's number in its clip, from 0.
public struct GrayFrame: Sendable, Equatable {
    public let width: Int
    public let height: Int
    public let pixels: [UInt8]
    public let index: Int

    public init(width: Int, height: Int, pixels: [UInt8], index: Int = 0) {
        precondition(width > 0 && height > 0 && pixels.count == width * height, "a gray frame is width × height bytes")
        self.width = width
        self.height = height
        self.pixels = pixels
        self.index = index
    }

    /// Copies rows `stride` bytes apart into a packed frame.
    public init(width: Int, height: Int, stride: Int, rows: UnsafePointer<UInt8>, index: Int) {
        var pixels = [UInt8](repeating: 0, count: width * height)
        pixels.withUnsafeMutableBufferPointer { packed in
            for row in 0..<height {
                (packed.baseAddress! + row * width).update(from: rows + row * stride, count: width)
            }
        }
        self.init(width: width, height: height, pixels: pixels, index: index)
    }

    /// Mean brightness (0…255) and its standard deviation.
    public var brightness: (mean: Double, deviation: Double) {
        var sum = 0, squares = 0
        for pixel in pixels {
            sum += Int(pixel)
            squares += Int(pixel) * Int(pixel)
        }
        let count = Double(pixels.count)
        let mean = Double(sum) / count
        return (mean, max(0, Double(squares) / count - mean * mean).squareRoot())
    }

    /// Mean absolute difference per pixel from `other` (0…255); infinity if the sizes differ.
    public func difference(from other: GrayFrame) -> Double {
        guard other.width == width, other.height == height else { return .infinity }
        var sum = 0
        for i in pixels.indices { sum += abs(Int(pixels[i]) - Int(other.pixels[i])) }
        return Double(sum) / Double(pixels.count)
    }
}
