public import HAL

/// Segments waiting for the socket, bounded by count and by age since capture.
///
/// The camera never waits for the network: when a bound is crossed the oldest segment goes, and
/// every drop is counted.
public struct SendQueue: Sendable {
    public let maxCount: Int
    public let maxAgeNs: UInt64
    public private(set) var items: [Segment] = []
    public private(set) var dropped = 0

    public init(maxCount: Int, maxAgeMs: Int) {
        self.maxCount = maxCount
        self.maxAgeNs = UInt64(maxAgeMs) * 1_000_000
    }

    /// Adds a segment; returns those dropped to make room or for being too old.
    public mutating func push(_ segment: Segment, now: UInt64) -> [Segment] {
        items.append(segment)
        var gone = expire(now: now)
        while items.count > maxCount {
            gone.append(items.removeFirst())
            dropped += 1
        }
        return gone
    }

    /// The oldest segment still young enough to send, and those that had grown too old.
    public mutating func pop(now: UInt64) -> (next: Segment?, expired: [Segment]) {
        let gone = expire(now: now)
        return (items.isEmpty ? nil : items.removeFirst(), gone)
    }

    private mutating func expire(now: UInt64) -> [Segment] {
        let maxAge = maxAgeNs
        func expired(_ segment: Segment) -> Bool {
            now > segment.metadata.captureStartMonotonicNs && now - segment.metadata.captureStartMonotonicNs > maxAge
        }
        let gone = items.filter(expired)
        items.removeAll(where: expired)
        dropped += gone.count
        return gone
    }
}
