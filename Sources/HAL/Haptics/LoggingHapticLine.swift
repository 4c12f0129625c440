public import Logging
import Synchronization

/// A stand-in for the motor on devices without a GPIO line: each pulse is a log line,
/// `haptics: buzz 150 ms`, written when the pulse ends, with the time it actually lasted.
public final class LoggingHapticLine: HapticLine {
    private struct State {
        var activeSince: ContinuousClock.Instant?
        var released = false
    }

    public let description: String
    private let logger: Logger
    private let level: Logger.Level
    private let state = Mutex(State())

    public init(logger: Logger, level: Logger.Level = .info, description: String = "log (no GPIO line)") {
        self.logger = logger
        self.level = level
        self.description = description
    }

    public func setActive(_ active: Bool) throws {
        let now = ContinuousClock.now
        let ended = try state.withLock { state throws(GPIOError) -> Duration? in
            guard !state.released else { throw .released(description) }
            if active {
                if state.activeSince == nil { state.activeSince = now }
                return nil
            }
            defer { state.activeSince = nil }
            return state.activeSince.map { $0.duration(to: now) }
        }
        if let ended { log(ended) }
    }

    public func release() {
        let now = ContinuousClock.now
        let ended = state.withLock { state -> Duration? in
            defer {
                state.activeSince = nil
                state.released = true
            }
            return state.activeSince.map { $0.duration(to: now) }
        }
        if let ended { log(ended) }
    }

    private func log(_ pulse: Duration) {
        let milliseconds = Int((pulse / .milliseconds(1)).rounded())
        logger.log(level: level, "haptics: buzz \(milliseconds) ms")
    }
}
