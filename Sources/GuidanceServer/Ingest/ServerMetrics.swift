import Metrics
public import Prometheus
import Synchronization

/// What the server counts, served at `GET /metrics` in Prometheus text format. One registry per
/// server (not the process-wide `MetricsSystem`), so servers in one process count apart.
public final class ServerMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory

    private let sessionsGauge: Metrics.Gauge
    private let open = Atomic<Int>(0)
    private let segmentsVerified: Metrics.Counter
    private let segmentsResent: Metrics.Counter
    private let rejected: [StreamSession.StateMachine.Rejection: Metrics.Counter]
    private let ledgerWrites: [LedgerWrite: Metrics.Counter]
    private let refused: [Refusal: Metrics.Counter]
    private let analyzerSeconds: Metrics.Timer
    private let ackSeconds: Metrics.Timer
    private let chargeSeconds: Metrics.Timer
    private let skipped: Metrics.Counter
    private let passwordHashes: Metrics.Counter
    private let serverErrors: Metrics.Counter
    private let inFlightBytes: Metrics.Gauge
    private let waitingForRoom: Metrics.Gauge
    private let roomWaits: Metrics.Counter

    public enum LedgerWrite: String, Sendable, CaseIterable {
        case charged, duplicate, fenced, failed
    }

    /// Why a connection got no session.
    public enum Refusal: String, Sendable, CaseIterable {
        case unauthorized, capacity, deviceCapacity = "device_capacity", handshakeTimeout = "handshake_timeout"
        /// `server.maxUpgradesInProgress` sessions were starting already.
        case starting
    }

    public init() {
        let registry = PrometheusCollectorRegistry()
        let factory = PrometheusMetricsFactory(registry: registry)
        self.registry = registry
        self.factory = factory
        sessionsGauge = Metrics.Gauge(label: "guidance_sessions", factory: factory)
        segmentsVerified = Metrics.Counter(label: "guidance_segments_verified_total", factory: factory)
        segmentsResent = Metrics.Counter(label: "guidance_segments_resent_total", factory: factory)
        rejected = Dictionary(
            uniqueKeysWithValues: StreamSession.StateMachine.Rejection.allCases.map {
                ($0, Metrics.Counter(label: "guidance_segments_rejected_total", dimensions: [("reason", $0.rawValue)], factory: factory))
            })
        ledgerWrites = Dictionary(
            uniqueKeysWithValues: LedgerWrite.allCases.map {
                ($0, Metrics.Counter(label: "guidance_ledger_writes_total", dimensions: [("result", $0.rawValue)], factory: factory))
            })
        refused = Dictionary(
            uniqueKeysWithValues: Refusal.allCases.map {
                ($0, Metrics.Counter(label: "guidance_connections_refused_total", dimensions: [("reason", $0.rawValue)], factory: factory))
            })
        analyzerSeconds = Metrics.Timer(label: "guidance_analyzer_duration_seconds", factory: factory)
        skipped = Metrics.Counter(label: "guidance_segments_not_analysed_total", factory: factory)
        ackSeconds = Metrics.Timer(label: "guidance_segment_ack_duration_seconds", factory: factory)
        chargeSeconds = Metrics.Timer(label: "guidance_ledger_charge_duration_seconds", factory: factory)
        passwordHashes = Metrics.Counter(label: "guidance_password_hashes_total", factory: factory)
        serverErrors = Metrics.Counter(label: "guidance_http_server_errors_total", factory: factory)
        inFlightBytes = Metrics.Gauge(label: "guidance_inflight_bytes", factory: factory)
        waitingForRoom = Metrics.Gauge(label: "guidance_inflight_waiting_sessions", factory: factory)
        roomWaits = Metrics.Counter(label: "guidance_inflight_waits_total", factory: factory)
        sessionsGauge.record(0)
        inFlightBytes.record(0)
        waitingForRoom.record(0)
    }

    func sessionOpened() { sessionsGauge.record(open.add(1, ordering: .relaxed).newValue) }
    func sessionClosed() { sessionsGauge.record(open.subtract(1, ordering: .relaxed).newValue) }
    func verified() { segmentsVerified.increment() }
    func resent() { segmentsResent.increment() }
    func rejected(_ reason: StreamSession.StateMachine.Rejection) { rejected[reason]?.increment() }
    func ledger(_ result: LedgerWrite) { ledgerWrites[result]?.increment() }
    func refused(_ reason: Refusal) { refused[reason]?.increment() }
    /// A segment waiting for the analyzer was replaced by a newer one of the same device.
    func analysisSkipped() { skipped.increment() }
    func analyzed(after duration: Duration) { analyzerSeconds.record(duration) }
    /// From a segment's last message read to its ack written: its inspection, its charge, and the
    /// waits between them.
    func acknowledged(after duration: Duration) { ackSeconds.record(duration) }
    /// A charge that the ledger answered (written, or found already written), from the session's
    /// call to its return: the group it joined, the one before it, and the waits between.
    func charged(after duration: Duration) { chargeSeconds.record(duration) }

    /// The bytes of segments being received (``InFlightBudget``) and the sessions waiting for room.
    func inFlight(bytes: Int, waiting: Int) {
        inFlightBytes.record(bytes)
        waitingForRoom.record(waiting)
    }
    /// A session found no room for its segment and waited (reading nothing meanwhile).
    func waitedForRoom() { roomWaits.increment() }

    /// An owner's password was hashed or checked (bcrypt: a quarter of a second of a core).
    func passwordHashed() { passwordHashes.increment() }
    /// A request was answered 5xx (``ServerErrorLog``).
    func serverError() { serverErrors.increment() }

    /// The text a Prometheus scrape gets.
    public func exposition() -> String { registry.emitToString() }
}

extension Metrics.Timer {
    func record(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
