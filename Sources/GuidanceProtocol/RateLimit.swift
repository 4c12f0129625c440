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

extension RateLimit {
    /// nil when this event is refused; else how many were refused before it (the count starts
    /// again): the form a log line that says what it left out wants.
    public mutating func admit(now: UInt64) -> Int? { allows(now: now) ? takeSuppressed() : nil }
}

/// A ``RateLimit`` for each key (a library's writer, a function), each with its own count; at
/// most `maxKeys` are remembered, the least recent forgotten first, so keys that come from
/// outside cannot grow it. Pure: time is passed in.
public struct RateLimits<Key: Hashable & Sendable>: Sendable {
    public let interval: Duration
    public let maxKeys: Int
    private var limits: [Key: RateLimit] = [:]
    private var order: [Key] = []

    public init(interval: Duration, maxKeys: Int) {
        self.interval = interval
        self.maxKeys = maxKeys
    }

    /// nil when `key`'s event is refused; else how many of `key`'s were refused before it.
    public mutating func admit(_ key: Key, now: UInt64) -> Int? {
        var limit = limits[key] ?? RateLimit(interval: interval)
        defer { limits[key] = limit }
        if let index = order.firstIndex(of: key) { order.remove(at: index) }
        order.append(key)
        if order.count > maxKeys { limits[order.removeFirst()] = nil }
        return limit.admit(now: now)
    }
}
