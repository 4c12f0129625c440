/// At most one event per interval passes; for log lines that a peer could make come fast.
/// `now` is `CLOCK_MONOTONIC` nanoseconds (agent and server both stamp with it).
public struct RateLimit: Sendable {
    public let interval: Duration
    private var last: UInt64?
    /// Events refused since the last one that passed.
    public private(set) var suppressed = 0

    public init(interval: Duration) { self.interval = interval }

    /// Whether this event passes; a refused one is counted in ``suppressed`` until the next passes.
    public mutating func allows(now: UInt64) -> Bool {
        let (seconds, attoseconds) = interval.components
        let intervalNs = seconds < 0 ? 0 : UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
        if let last, now - min(now, last) < intervalNs {
            suppressed += 1
            return false
        }
        last = now
        return true
    }

    /// How many were refused before the one that just passed; resets the count.
    public mutating func takeSuppressed() -> Int {
        defer { suppressed = 0 }
        return suppressed
    }
}
