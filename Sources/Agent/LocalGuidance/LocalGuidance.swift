import Foundation
public import GuidanceProtocol
import HAL
public import Logging
import RoadScene
import ServiceLifecycle
import UTC

/// Runs ``LocalGuidance.StateMachine``: hears the uplink's sessions and the usage from ``GuidanceService``,
/// the clock and ``RoadWatch``'s looks from ``LocalGuidanceService``, and does what the rules
/// answer: starts and stops the watch, says the status phrases, and speaks local findings
/// through the ``GuidanceRouter`` (the same voice and motor as server guidance).
public actor LocalGuidance {
    private var rules: LocalGuidance.StateMachine
    /// `offline.enabled`, `offline.repeatMs` and `guidance.offlineAfterMs`, which SIGHUP may change.
    public nonisolated let settings: Reloadable<LocalGuidance.StateMachine.Settings>
    private let watch: RoadWatch
    private let router: GuidanceRouter
    private let announcer: StatusAnnouncer
    private let board: StatusBoard
    private let logger: Logger

    public init(
        settings: LocalGuidance.StateMachine.Settings, watch: RoadWatch, router: GuidanceRouter, announcer: StatusAnnouncer,
        board: StatusBoard, logger: Logger, now: ContinuousClock.Instant = .now
    ) {
        rules = LocalGuidance.StateMachine(settings: settings, now: now)
        self.settings = Reloadable(settings)
        self.watch = watch
        self.router = router
        self.announcer = announcer
        self.board = board
        self.logger = logger
        board.update { $0.localGuidance = .init(enabled: settings.enabled) }
    }

    public func uplink(_ state: Uplink.ConnectionState) async {
        if case .connected = state {
            await perform(rules.sessionOpened(now: .now))
        } else {
            await perform(rules.sessionClosed(now: .now))
        }
    }

    /// Reads what the server says of the usage and of its model service; the rest is the router's.
    public func received(_ message: ServerMessage) async {
        switch message {
        case .welcome(_, let remaining):
            await perform(rules.usage(remainingSeconds: remaining, now: .now))
        case .usage(let remaining):
            await perform(rules.usage(remainingSeconds: remaining, now: .now))
        case .error(.quotaExhausted, _, _):
            await perform(rules.usage(remainingSeconds: 0, now: .now))
        case .error(.guidanceUnavailable, _, _):
            await perform(rules.guidanceUnavailable(true, now: .now))
        case .guidance:
            await perform(rules.guidanceUnavailable(false, now: .now))
        default:
            break
        }
    }

    /// Called every quarter second: the no-session deadline, and settings SIGHUP changed.
    public func tick() async {
        let settings = settings.current
        if settings != rules.settings {
            board.update { $0.localGuidance?.enabled = settings.enabled }
            await perform(rules.reconfigure(settings, now: .now))
        }
        guard let deadline = rules.deadline, deadline <= .now else { return }
        await perform(rules.tick(now: .now))
    }

    public func looked(_ look: RoadWatch.Look) async {
        // (Frames looked at and skipped are read from the watch when `status` asks.)
        board.update { status in
            status.localGuidance?.lastLookMs = look.took.milliseconds
            if let finding = look.finding {
                status.localGuidance?.lastFinding = .init(finding: finding.rawValue, at: Date().rfc3339Milliseconds)
            }
        }
        await perform(rules.looked(look.finding, now: .now))
    }

    private func perform(_ actions: [LocalGuidance.StateMachine.Action]) async {
        for action in actions {
            switch action {
            case .startLooking(let reason):
                logger.notice("guidance: local checks on (\(reason.rawValue))")
                watch.start()
                board.update {
                    $0.localGuidance?.state = "on"
                    $0.localGuidance?.reason = reason.rawValue
                    $0.localGuidance?.since = Date().rfc3339Milliseconds
                }
            case .stopLooking:
                watch.stop()
                let counts = watch.counts
                logger.notice("guidance: local checks off", metadata: ["looked": "\(counts.looked)", "skipped": "\(counts.skipped)"])
                board.update {
                    $0.localGuidance?.state = "standby"
                    $0.localGuidance?.reason = nil
                    $0.localGuidance?.since = nil
                }
            case .announce(let phrase):
                await announcer.say(phrase)
            case .warn(let finding, let phrases):
                router.local(finding, after: phrases)
            }
        }
        if !rules.settings.enabled { board.update { $0.localGuidance?.state = "off" } }
    }
}

/// The local guidance as one service: feeds ``RoadWatch``'s looks and the clock to
/// ``LocalGuidance`` until the group stops, then ends the watch's thread.
///
/// After the uplink in the group, so it is stopped before the voice and the motor are released.
struct LocalGuidanceService: Service {
    let guidance: LocalGuidance
    let watch: RoadWatch

    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { [watch, guidance] in
                for await look in watch.results { await guidance.looked(look) }
            }
            group.addTask { [guidance] in
                while (try? await Task.sleep(for: .milliseconds(250))) != nil {
                    await guidance.tick()
                }
            }
            try? await gracefulShutdown()
            watch.stop()
            group.cancelAll()
            await watch.shutdown()
        }
    }
}

extension AgentConfig {
    public var localGuidanceSettings: LocalGuidance.StateMachine.Settings {
        .init(enabled: offline.enabled, offlineAfter: .milliseconds(guidance.offlineAfterMs), repeatAfter: .milliseconds(offline.repeatMs))
    }
}
