import GuidanceProtocol
import Logging
import Synchronization

/// A log line that peers can make come fast (a refused upgrade, a bad webhook): at most one a
/// second passes, and the next that passes tells how many were left out. Shared by every
/// connection that can write it.
final class LogLimit: Sendable {
    private let limit = Mutex(RateLimit(interval: .seconds(1)))
    /// Monotonic nanoseconds; a test passes its own.
    private let now: @Sendable () -> UInt64

    init(now: @escaping @Sendable () -> UInt64 = { StreamSession.now() }) { self.now = now }

    /// Logs `message` at `level` unless one went out within the second.
    func log(_ logger: Logger, _ level: Logger.Level, _ message: @autoclosure () -> String, metadata: Logger.Metadata? = nil) {
        let now = self.now()
        guard let skipped = limit.withLock({ $0.admit(now: now) }) else { return }
        logger.log(level: level, "\(message())\(skipped > 0 ? " (and \(skipped) more like it left out)" : "")", metadata: metadata)
    }
}
