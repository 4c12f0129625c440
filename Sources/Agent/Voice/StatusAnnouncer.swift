/// Decides which status phrases the driver hears: each once per change of state, never in a loop.
///
/// - `ready` once at start.
/// - `connected` at the first session, and again only after `connection lost` was spoken.
/// - `connection lost` once the uplink has been without a session for `lostAfter` (10 s), so a
///   network hand-over or a server restart that heals at once says nothing.
/// - `authentication failed` once per run of refusals; `no device token` once while the token
///   file stays unusable (both again only after a session opened in between).
/// - The remaining usage at the first welcome; `usage low` once when it drops under 10 minutes,
///   `usage exhausted` once at 0 (either again only after usage went back up).
/// - `camera lost` when the camera goes, `camera back` when it returns.
/// - `guidance unavailable` once when the server says its model is down, again only after
///   guidance came back in between.
/// - `guidance is now local` and `guidance from the server is back` when the local guidance says.
///
/// Phrases due within `gather` of each other are spoken as one utterance ("connected, 43
/// minutes left"), not as several in a row. Each utterance is kept by the speaker: guidance that
/// comes while it waits goes first, but does not replace it.
///
/// The rules are ``StateMachine``'s (pure, tested with time passed in); this actor feeds it the
/// clock and keeps one timer for its ``StateMachine/deadline``.
public actor StatusAnnouncer {
    public static let lowUsageSeconds = StateMachine.lowUsageSeconds

    private let speak: @Sendable ([StatusPhrase]) -> Void
    private var machine: StateMachine
    private var timer: Task<Void, Never>?
    private var timerDeadline: ContinuousClock.Instant?

    public init(
        lostAfter: Duration = .seconds(10), gather: Duration = .milliseconds(250),
        speak: @escaping @Sendable ([StatusPhrase]) -> Void
    ) {
        machine = StateMachine(lostAfter: lostAfter, gather: gather)
        self.speak = speak
    }

    public func started() { update { $0.started(now: .now) } }
    public func uplink(_ state: Uplink.ConnectionState) { update { $0.uplink(state, now: .now) } }
    public func usage(remainingSeconds: Int?, fromWelcome: Bool) {
        update { $0.usage(remainingSeconds: remainingSeconds, fromWelcome: fromWelcome, now: .now) }
    }
    public func usageExhausted() { usage(remainingSeconds: 0, fromWelcome: false) }
    /// The server's model is down (`guidance_unavailable`).
    public func guidanceUnavailable() { update { $0.guidanceUnavailable(now: .now) } }
    /// Guidance (or a clear road) arrived: the model answers again.
    public func guidanceArrived() { update { $0.guidanceArrived() } }
    public func camera(_ event: CameraEvent) { update { $0.camera(event, now: .now) } }

    /// A phrase whose once-only rule is kept elsewhere (the local guidance's), spoken at once
    /// with any gathered before it.
    public func say(_ phrase: StatusPhrase) {
        let utterance = machine.say(phrase)
        speak(utterance)
        schedule()
    }

    private func update(_ event: (inout StateMachine) -> Void) {
        event(&machine)
        schedule()
    }

    /// One timer, for the machine's next deadline; replaced when that deadline moves.
    private func schedule() {
        guard let deadline = machine.deadline else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        guard deadline != timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            guard !Task.isCancelled else { return }
            await self?.fire()
        }
    }

    private func fire() {
        timer = nil
        timerDeadline = nil
        let utterance = machine.tick(now: .now)
        if !utterance.isEmpty { speak(utterance) }
        schedule()
    }
}
