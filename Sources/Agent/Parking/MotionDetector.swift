public import HAL

/// Motion in a parked car's view, from the luma of each frame: a pure machine, tested on pictures.
///
/// The picture is cut into a grid of blocks and each block's mean brightness taken. The means are
/// normalised by the frame's own mean and spread, so a change of the whole frame's lighting (a
/// street lamp coming on, a cloud, the camera's exposure) moves every block alike and cancels
/// out. Each is compared with the scene as it has been (a running mean of the frames before,
/// ``Settings/learning`` of each new frame), so something slow that walks in is seen as it
/// arrives. A block has changed when its normalised value differs from the scene's by more than
/// ``Settings/change`` *and* its brightness by more than ``Settings/minLuma`` (noise in a flat
/// dark picture is not motion). Motion is at least ``Settings/blocks`` changed blocks.
public struct MotionDetector: Sendable {
    public struct Settings: Sendable, Equatable {
        public var columns = 16
        public var rows = 9
        /// Normalised change a block needs (in units of the frame's spread of block means).
        public var change = 0.35
        /// Brightness change a block needs too, on 0–255.
        public var minLuma = 6.0
        /// How much of each frame goes into the scene it is compared with.
        public var learning = 0.2
        /// Changed blocks that make motion (of `columns × rows`).
        public var blocks: Int

        public init(blocks: Int) {
            self.blocks = blocks
        }

        /// `parking.sensitivity`: how much of the view must change (of 144 blocks); nil for `off`.
        public init?(sensitivity: IncidentSensitivity) {
            switch sensitivity {
            case .high: self.init(blocks: 2)
            case .medium: self.init(blocks: 4)
            case .low: self.init(blocks: 10)
            case .off: return nil
            }
        }
    }

    public let settings: Settings
    /// The scene as it has been: running means of the block values, raw and normalised.
    private var scene: (raw: [Double], normalised: [Double])?

    public init(settings: Settings) {
        self.settings = settings
    }

    /// Changed blocks between this picture and the one before (0 for the first, or a picture
    /// too small for the grid, which also starts over).
    public mutating func changedBlocks(_ luma: Luma) -> Int {
        guard let means = Self.blockMeans(luma, columns: settings.columns, rows: settings.rows) else {
            scene = nil
            return 0
        }
        let normalised = Self.normalise(means)
        guard var learnt = scene, learnt.raw.count == means.count else {
            scene = (means, normalised)
            return 0
        }
        var changed = 0
        for i in means.indices
        where abs(normalised[i] - learnt.normalised[i]) > settings.change
            && abs(means[i] - learnt.raw[i]) > settings.minLuma
        {
            changed += 1
        }
        // A change of the whole frame's lighting moves every raw mean: the scene takes the new
        // lighting at once, so it is not seen as change again and again.
        let a = settings.learning
        let shift = zip(means, learnt.raw).reduce(0) { $0 + $1.0 - $1.1 } / Double(means.count)
        for i in means.indices {
            learnt.raw[i] = (1 - a) * (learnt.raw[i] + shift) + a * means[i]
            learnt.normalised[i] = (1 - a) * learnt.normalised[i] + a * normalised[i]
        }
        scene = learnt
        return changed
    }

    /// Whether this picture shows motion against the one before.
    public mutating func look(_ luma: Luma) -> Bool {
        changedBlocks(luma) >= settings.blocks
    }

    /// Mean brightness of each block, row by row; nil when a block would be empty.
    static func blockMeans(_ luma: Luma, columns: Int, rows: Int) -> [Double]? {
        guard columns > 0, rows > 0, luma.width >= columns, luma.height >= rows,
            luma.pixels.count >= luma.width * luma.height
        else { return nil }
        var sums = [Int](repeating: 0, count: columns * rows)
        var counts = [Int](repeating: 0, count: columns * rows)
        luma.pixels.withUnsafeBufferPointer { pixels in
            for y in 0..<luma.height {
                let row = y * rows / luma.height
                let base = y * luma.width
                for x in 0..<luma.width {
                    let block = row * columns + x * columns / luma.width
                    sums[block] += Int(pixels[base + x])
                    counts[block] += 1
                }
            }
        }
        return zip(sums, counts).map { Double($0) / Double($1) }
    }

    /// `(m − mean) / spread`, the spread at least 8 so a nearly flat picture is not blown up.
    static func normalise(_ means: [Double]) -> [Double] {
        let mean = means.reduce(0, +) / Double(means.count)
        let variance = means.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(means.count)
        let spread = max(variance.squareRoot(), 8)
        return means.map { ($0 - mean) / spread }
    }
}
