import GuidanceProtocol
import Logging
import ServiceLifecycle

/// Hears of cars unpaired at any instance (the owners' pages of another one): every
/// ``interval`` one query for those unpaired since the last, added to ``UnpairedDevices``, so
/// their streams here are closed (4401) within a few seconds and their access tokens refused.
struct UnpairWatch: Service {
    let store: any OwnerStore
    let unpaired: UnpairedDevices
    /// How long back the first look goes: an access token lives at most this long.
    let lookBackMs: Int64
    let now: @Sendable () -> Int64
    let logger: Logger
    static let interval = Duration.seconds(2)

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var since = now() - lookBackMs
            var failures = RateLimit(interval: .seconds(60))
            while !Task.isCancelled {
                do {
                    let checked = now()
                    for (device, at) in try await store.unpaired(sinceMs: since) where !unpaired.contains(device) {
                        unpaired.add(device)
                        logger.info("device unpaired (heard from the ledger)", metadata: ["device": "\(device)", "at": "\(at)"])
                    }
                    // A little overlap: a row written just before `checked` by a slower clock is seen next time.
                    since = checked - 5_000
                } catch {
                    if failures.allows(now: StreamSession.now()) { logger.warning("unpaired cars: the ledger did not answer: \(error)") }
                }
                try await Task.sleep(for: Self.interval)
            }
        }
    }
}
