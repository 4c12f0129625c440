/// When to try the server again: exponential backoff with full jitter.
///
/// The delay before attempt *n* is uniform in `0 … min(cap, base·2ⁿ)`, so a fleet that lost the
/// same server does not come back in lockstep. A session that lived long enough resets it.
public struct Backoff: Sendable {
    public var base: Duration = .milliseconds(250)
    public var cap: Duration = .seconds(30)
    /// A session at least this old was healthy: the next failure starts from `base` again.
    public var resetAfter: Duration = .seconds(30)
    public private(set) var attempt = 0

    public init(base: Duration = .milliseconds(250), cap: Duration = .seconds(30)) {
        self.base = base
        self.cap = cap
    }

    /// The delay before the next attempt, given how long the last session lived.
    public mutating func next(sessionLived: Duration?, random: (Double) -> Double = { Double.random(in: 0...$0) }) -> Duration {
        if let lived = sessionLived, lived >= resetAfter { attempt = 0 }
        let ceiling = min(cap, base * Double(1 << min(attempt, 20)))
        attempt += 1
        let seconds = Double(ceiling.components.seconds) + Double(ceiling.components.attoseconds) / 1e18
        return .seconds(random(seconds))
    }

    public mutating func reset() { attempt = 0 }
}

extension Duration {
    /// Whole milliseconds (rounded down): for configuration defaults written in ms.
    var wholeMilliseconds: Int { Int(self / .milliseconds(1)) }

    /// `45 ms`, `1.2 s`, `60 s`: for log lines.
    var logText: String {
        let ms = self / .milliseconds(1)
        if ms < 1000 { return "\(Int(ms.rounded())) ms" }
        let seconds = (ms / 100).rounded() / 10
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}
