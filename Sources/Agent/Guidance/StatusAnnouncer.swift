/// Decides which status phrases the driver hears: each once per change of state, never in a loop.
///
/// - `ready` once at start.
/// - `connected` at the first session, and again only after `connection lost` was spoken.
/// - `connection lost` once the uplink has been without a session for ``lostAfter`` (10 s), so a
///   network hand-over or a server restart that heals at once says nothing.
/// - `authentication failed` once per run of refusals; `no device token` once while the token
///   file stays unusable (both again only after a session opened in between).
/// - The remaining usage at the first welcome; `usage low` once when it drops under 10 minutes,
///   `usage exhausted` once at 0 (either again only after usage went back up).
/// - `camera lost` when the camera goes, `camera back` when it returns.
/// - `guidance unavailable` once when the server says its model service is down, again only
///   after guidance came back in between.
///
/// - `guidance is now local` and `guidance from the server is back` when ``LocalGuidanceRules`` says.
///
/// Phrases due within ``gather`` of each other are spoken as one utterance ("connected, 43
/// minutes left"): one after the other, each would replace the one waiting before it.
public actor StatusAnnouncer {
    public static let lowUsageSeconds = 600

    private let speak: @Sendable ([StatusPhrase]) -> Void
    private let lostAfter: Duration
    private let gather: Duration
    private var pending: [StatusPhrase] = []
    private var flush: Task<Void, Never>?
    private var everConnected = false
    private var lostSpoken = false
    private var authSpoken = false
    private var tokenSpoken = false
    private var lostTimer: Task<Void, Never>?
    private var usageSpoken = false
    private var lowSpoken = false
    private var exhaustedSpoken = false
    private var cameraLost = false
    private var unavailableSpoken = false

    public init(lostAfter: Duration = .seconds(10), gather: Duration = .milliseconds(250),
                speak: @escaping @Sendable ([StatusPhrase]) -> Void) {
        self.lostAfter = lostAfter
        self.gather = gather
        self.speak = speak
    }

    private func announce(_ phrases: [StatusPhrase]) {
        guard !phrases.isEmpty else { return }
        pending += phrases
        guard flush == nil else { return }
        let delay = gather
        flush = Task { [weak self] in
            try? await Task.sleep(for: delay)
            guard !Task.isCancelled else { return }
            await self?.speakPending()
        }
    }

    private func speakPending() {
        flush = nil
        let phrases = pending
        pending = []
        speak(phrases)
    }

    public func started() {
        announce([.ready])
    }

    public func uplink(_ state: Uplink.ConnectionState) {
        switch state {
        case .connected:
            lostTimer?.cancel()
            lostTimer = nil
            authSpoken = false
            tokenSpoken = false
            if !everConnected || lostSpoken { announce([.connected]) }
            everConnected = true
            lostSpoken = false
        case .authenticationFailed:
            lostTimer?.cancel()
            lostTimer = nil
            if !authSpoken { announce([.authenticationFailed]) }
            authSpoken = true
        case .noToken:
            lostTimer?.cancel()
            lostTimer = nil
            if !tokenSpoken { announce([.noToken]) }
            tokenSpoken = true
        case .connecting, .disconnected:
            guard lostTimer == nil, !lostSpoken, !authSpoken, !tokenSpoken else { return }
            let delay = lostAfter
            lostTimer = Task { [weak self] in
                try? await Task.sleep(for: delay)
                guard !Task.isCancelled else { return }
                await self?.connectionStillLost()
            }
        case .stopped:
            lostTimer?.cancel()
            lostTimer = nil
        }
    }

    private func connectionStillLost() {
        lostTimer = nil
        guard !lostSpoken, !authSpoken, !tokenSpoken else { return }
        lostSpoken = true
        announce([.connectionLost])
    }

    /// `remainingSeconds` from a welcome (`nil`: unlimited) or a usage message.
    public func usage(remainingSeconds: Int?, fromWelcome: Bool) {
        var phrases: [StatusPhrase] = []
        if fromWelcome, !usageSpoken {
            usageSpoken = true
            if let seconds = remainingSeconds, seconds > 0 {
                phrases.append(.usageRemaining(minutes: seconds / 60))
                if seconds < Self.lowUsageSeconds { lowSpoken = true }
            } else if remainingSeconds == nil {
                phrases.append(.usageUnlimited)
            }
        }
        if let seconds = remainingSeconds {
            if seconds <= 0 {
                if !exhaustedSpoken { phrases.append(.usageExhausted) }
                exhaustedSpoken = true
            } else if seconds < Self.lowUsageSeconds {
                if !lowSpoken { phrases.append(.usageLow(minutes: seconds / 60)) }
                lowSpoken = true
                exhaustedSpoken = false
            } else {
                lowSpoken = false
                exhaustedSpoken = false
            }
        }
        announce(phrases)
    }

    public func usageExhausted() {
        usage(remainingSeconds: 0, fromWelcome: false)
    }

    /// The server's model service is down (`guidance_unavailable`).
    public func guidanceUnavailable() {
        guard !unavailableSpoken else { return }
        unavailableSpoken = true
        announce([.guidanceUnavailable])
    }

    /// Guidance (or a clear road) arrived: the model service answers again.
    public func guidanceArrived() {
        unavailableSpoken = false
    }

    /// A phrase whose once-only rule is kept elsewhere (``LocalGuidanceRules``), spoken at once with
    /// any gathered before it: the local warnings that follow must come after it, not replace it.
    public func say(_ phrase: StatusPhrase) {
        flush?.cancel()
        pending.append(phrase)
        speakPending()
    }

    public func camera(_ event: CameraEvent) {
        switch event {
        case .lost where !cameraLost:
            cameraLost = true
            announce([.cameraLost])
        case .back where cameraLost:
            cameraLost = false
            announce([.cameraBack])
        default:
            break
        }
    }
}
