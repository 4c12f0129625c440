import Foundation
import Logging
import NIOPosix
import ServiceLifecycle

/// Deletes clips and trips older than `clips.retentionDays`: at the start, then every
/// ``interval``, on the blocking pool. Every instance of a fleet sweeps the shared store; a clip
/// deleted by one is skipped by the others.
struct ClipRetention: Service {
    let store: (any ClipStore)?
    var trips: (any TripStore)? = nil
    let days: Int
    let now: @Sendable () -> Date
    let logger: Logger
    static let interval = Duration.seconds(3600)

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let cutoff = now().addingTimeInterval(-Double(days) * 86_400)
                if let store {
                    do {
                        let deleted = try await NIOThreadPool.singleton.runIfActive { try store.expire(before: cutoff) }
                        if deleted > 0 { logger.notice("clips: deleted \(deleted) clip(s) older than \(days) days (clips.retentionDays)") }
                    } catch {
                        logger.error("clips: the retention sweep failed: \(error)")
                    }
                }
                do {
                    try await trips?.expireTrips(beforeMs: Int64(cutoff.timeIntervalSince1970 * 1000))
                } catch {
                    logger.error("trips: the retention sweep failed: \(error)")
                }
                try await Task.sleep(for: Self.interval)
            }
        }
    }
}
