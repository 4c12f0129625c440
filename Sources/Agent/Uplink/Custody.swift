import HAL

/// The segments the uplink is responsible for: those not yet sent, and those sent on the current
/// session and not yet acknowledged. A segment leaves custody only when the server acknowledges
/// it, or when a bound drops it (counted).
///
/// Both kinds count against one bound by number (`maxCount`); the oldest goes first. A segment
/// older than `maxAgeNs` (since capture) is dropped instead of sent or re-sent.
public struct Custody: Sendable {
    public let maxCount: Int
    public let maxAgeNs: UInt64
    /// Waiting to be sent, in sequence order; re-sends come first because they are older.
    public private(set) var unsent: [Segment] = []
    /// Sent on the current session, waiting for their `ack`, in the order sent.
    public private(set) var inFlight: [Segment] = []
    public private(set) var dropped = 0
    /// Highest sequence number ever sent, to tell a late `ack` from one for a segment never sent.
    public private(set) var highestSent: Int?

    public init(maxCount: Int, maxAgeMs: Int) {
        self.maxCount = maxCount
        self.maxAgeNs = UInt64(max(0, maxAgeMs)) * 1_000_000
    }

    public var count: Int { unsent.count + inFlight.count }
    public var isEmpty: Bool { unsent.isEmpty && inFlight.isEmpty }

    /// Takes a new segment; returns how many were dropped to make room or for their age.
    public mutating func push(_ segment: Segment, now: UInt64) -> Int {
        insertInOrder(segment)
        var gone = expireUnsent(now: now)
        while count > maxCount {
            // The oldest of both kinds: an in-flight segment is older than any unsent one.
            if let first = inFlight.first, unsent.first.map({ $0.metadata.seq > first.metadata.seq }) ?? true {
                inFlight.removeFirst()
            } else {
                unsent.removeFirst()
            }
            gone += 1
        }
        dropped += gone
        return gone
    }

    /// The next segment to send, now counted as in flight, and how many were dropped for their age.
    public mutating func takeNext(now: UInt64) -> (next: Segment?, dropped: Int) {
        let gone = expireUnsent(now: now)
        dropped += gone
        guard !unsent.isEmpty else { return (nil, gone) }
        let next = unsent.removeFirst()
        inFlight.append(next)
        highestSent = max(highestSent ?? next.metadata.seq, next.metadata.seq)
        return (next, gone)
    }

    public enum AckResult: Equatable, Sendable {
        /// The segment left custody.
        case released
        /// Sent earlier but no longer held: acknowledged twice, or dropped by a bound meanwhile.
        case late
        /// A sequence number this run never sent.
        case unknown
    }

    public mutating func acknowledge(seq: Int) -> AckResult {
        if let index = inFlight.firstIndex(where: { $0.metadata.seq == seq }) {
            inFlight.remove(at: index)
            return .released
        }
        // Taken back from a session that was given up, and acknowledged by it after all.
        if let index = unsent.firstIndex(where: { $0.metadata.seq == seq }), seq <= (highestSent ?? .min) {
            unsent.remove(at: index)
            return .released
        }
        return seq <= (highestSent ?? .min) ? .late : .unknown
    }

    /// The session they were sent on is gone: what it did not acknowledge is sent again first.
    public mutating func takeBackInFlight() {
        for segment in inFlight { insertInOrder(segment) }
        inFlight.removeAll()
    }

    private mutating func insertInOrder(_ segment: Segment) {
        let seq = segment.metadata.seq
        let index = unsent.lastIndex(where: { $0.metadata.seq < seq }).map { $0 + 1 } ?? 0
        if index < unsent.count, unsent[index].metadata.seq == seq { return }
        unsent.insert(segment, at: index)
    }

    private mutating func expireUnsent(now: UInt64) -> Int {
        let maxAge = maxAgeNs
        func tooOld(_ segment: Segment) -> Bool {
            now > segment.metadata.captureStartMonotonicNs && now - segment.metadata.captureStartMonotonicNs > maxAge
        }
        let before = unsent.count
        unsent.removeAll(where: tooOld)
        return before - unsent.count
    }
}
