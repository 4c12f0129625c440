/// Places frames on a fixed-rate timeline and says where segments begin.
///
/// Slot `n` is the frame period that starts `n / fps` seconds after the first frame of the
/// current source session. A frame takes the slot nearest its capture time; slots left empty are
/// dropped frames, and a frame landing on a slot already taken (a source faster than the
/// configured rate) is skipped. Segment `k` holds slots `k·N ..< (k+1)·N`, so with no drops it
/// holds exactly `N = fps × seconds` frames. The timeline restarts when the source reopens.
public struct SegmentClock: Sendable {
    public struct Placement: Equatable, Sendable {
        public var slot: Int64
        /// The first frame of a new segment: encode it as an IDR.
        public var startsSegment: Bool

        public init(slot: Int64, startsSegment: Bool) {
            self.slot = slot
            self.startsSegment = startsSegment
        }
    }

    public let fps: Int
    public let framesPerSegment: Int
    public private(set) var anchor: UInt64?
    private var lastSlot: Int64 = -1

    public init(fps: Int, segmentSeconds: Int) {
        self.fps = fps
        self.framesPerSegment = fps * segmentSeconds
    }

    /// `nil` means skip this frame.
    public mutating func place(timestamp: UInt64) -> Placement? {
        guard let anchor else {
            self.anchor = timestamp
            lastSlot = 0
            return Placement(slot: 0, startsSegment: true)
        }
        guard timestamp >= anchor else { return nil }
        let elapsed = timestamp - anchor
        let period = 1_000_000_000.0 / Double(fps)
        let slot = Int64((Double(elapsed) / period).rounded())
        guard slot > lastSlot else { return nil }
        let n = Int64(framesPerSegment)
        let starts = slot / n != lastSlot / n
        lastSlot = slot
        return Placement(slot: slot, startsSegment: starts)
    }

    /// Takes a frame another stream's clock placed at `slot` of its `fps` timeline: the slot of
    /// this (slower) timeline that starts in the same frame period, once; `nil` means skip it.
    ///
    /// Both timelines begin at the same frame and cut segments at the same seconds, so the first
    /// frame the other stream puts in a segment is this stream's first frame of that segment
    /// too: a decimated copy whose segments start where the other's do.
    public mutating func place(following slot: Int64, fps other: Int, timestamp: UInt64) -> Placement? {
        precondition(other >= fps, "a following timeline is not faster than the one it follows")
        let mine = slot * Int64(fps) / Int64(other)
        if anchor == nil {
            // The other timeline's anchor: this frame's time less the slots before it.
            anchor = timestamp &- UInt64(slot) * 1_000_000_000 / UInt64(other)
            lastSlot = -1
        }
        guard mine > lastSlot else { return nil }
        let n = Int64(framesPerSegment)
        let starts = lastSlot < 0 || mine / n != lastSlot / n
        lastSlot = mine
        return Placement(slot: mine, startsSegment: starts)
    }

    /// Starts a new timeline at the next frame (after the source reopened).
    public mutating func restart() {
        anchor = nil
        lastSlot = -1
    }

    public func segmentIndex(ofSlot slot: Int64) -> Int64 { slot / Int64(framesPerSegment) }

    /// Nominal capture time of a slot on `CLOCK_MONOTONIC`.
    public func time(ofSlot slot: Int64) -> UInt64 {
        (anchor ?? 0) + UInt64(slot) * 1_000_000_000 / UInt64(fps)
    }
}
