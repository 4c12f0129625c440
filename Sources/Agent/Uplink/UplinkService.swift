import HAL
import Logging
import ServiceLifecycle

/// The uplink as a service: sessions run until a graceful shutdown, which sends what is held,
/// waits `uplink.drainMs` for its acknowledgements and guidance, and closes with 1001.
///
/// Later in the group than the recording, so it is shut down after the last segment is in its custody.
struct UplinkService: Service {
    let uplink: Uplink
    let logger: Logger

    func run() async {
        let (changes, path) = networkChanges()
        await withDiscardingTaskGroup { group in
            group.addTask { [uplink] in
                // Cancelled (the run ended on its own) or told to stop: either way, drain and close.
                try? await gracefulShutdown()
                await uplink.shutdown()
            }
            await uplink.run(networkChanges: changes, path: path)
            group.cancelAll()
        }
        let stats = await uplink.stats
        logger.notice(
            "uplink: sent \(stats.sent), acked \(stats.acked), re-sent \(stats.resent), dropped \(stats.dropped), stale guidance \(stats.staleGuidance), sessions \(stats.sessions)"
        )
    }

    /// Changes of the default route or its addresses, which make the uplink open a new session,
    /// and the path now (is it a wireless LAN, for `upload.when`).
    private func networkChanges() -> (AsyncStream<NetworkChange>, NetworkPath?) {
        do {
            let monitor = try RTNetlinkMonitor(logger: logger)
            return (monitor.changes(), monitor.currentPath)
        } catch {
            logger.warning("uplink: \(error); network changes will not trigger a new session")
            return (AsyncStream { $0.finish() }, nil)
        }
    }
}
