import HAL
public import ServiceLifecycle

/// Feeds systemd's watchdog from the pipeline's own progress: `READY=1` once frames flow, then
/// `WATCHDOG=1` only while frames keep coming and segments keep closing on time. A wedged
/// pipeline stops the pings, and systemd kills and restarts the service after `WatchdogSec`.
///
/// First in the service group, so the last to stop: it keeps the watchdog fed while the
/// recording closes its last segment and the uplink drains.
public struct ServiceHeartbeat: Service {
    public let health: PipelineHealth
    public let notifier: SystemdNotifier
    /// The longest a segment may take to close: its length plus slack.
    public let segmentDeadline: Duration
    /// The longest the camera may go without a frame: the pipeline's own stall limit plus slack.
    public let frameDeadline: Duration
    /// Half of systemd's `WATCHDOG_USEC`, else one second.
    public let interval: Duration
    public let readyStatus: String

    public init(
        health: PipelineHealth, notifier: SystemdNotifier, segmentDeadline: Duration, frameDeadline: Duration,
        watchdogMicroseconds: String?, readyStatus: String
    ) {
        self.health = health
        self.notifier = notifier
        self.segmentDeadline = segmentDeadline
        self.frameDeadline = frameDeadline
        let watchdog = watchdogMicroseconds.flatMap(Int64.init).map { Duration.microseconds($0) }
        interval = watchdog.map { max(.milliseconds(100), $0 / 2) } ?? .seconds(1)
        self.readyStatus = readyStatus
    }

    public func run() async {
        await cancelWhenGracefulShutdown { await beat() }
    }

    private func beat() async {
        var ready = false
        var healthy = false
        while !Task.isCancelled {
            let now = MonotonicClock.now()
            if !ready, health.firstFrameNs != 0 {
                notifier.ready(status: readyStatus)
                ready = true
                healthy = true
            }
            let isHealthy = Self.isHealthy(
                now: now, lastFrame: health.lastFrameNs, lastSegment: health.lastSegmentNs, firstFrame: health.firstFrameNs,
                frameDeadline: frameDeadline, segmentDeadline: segmentDeadline)
            if ready, isHealthy { notifier.watchdog() }
            if ready, isHealthy != healthy {
                notifier.status(isHealthy ? readyStatus : "no frames from the camera or a segment is late; watchdog pings stopped")
            }
            healthy = isHealthy
            try? await Task.sleep(for: interval)
        }
    }

    /// Frames came within `frameDeadline`, and the last segment (or the first frame, before any
    /// segment) is no older than `segmentDeadline`.
    public static func isHealthy(
        now: UInt64, lastFrame: UInt64, lastSegment: UInt64, firstFrame: UInt64,
        frameDeadline: Duration, segmentDeadline: Duration
    ) -> Bool {
        func within(_ since: UInt64, _ limit: Duration) -> Bool {
            since != 0 && (now <= since || Duration.nanoseconds(Int64(now - since)) <= limit)
        }
        return within(lastFrame, frameDeadline) && within(lastSegment != 0 ? lastSegment : firstFrame, segmentDeadline)
    }
}
