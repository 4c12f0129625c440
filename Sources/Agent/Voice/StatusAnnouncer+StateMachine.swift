extension StatusAnnouncer {
    /// Which status phrases are due, and when: the rules of ``StatusAnnouncer`` with no clock,
    /// task or thread of its own. Events go in with the time they happened; ``tick(now:)``
    /// answers with the utterance due by then, and ``deadline`` says when to call it next.
    public struct StateMachine: Sendable {
        public typealias Instant = ContinuousClock.Instant

        public static let lowUsageSeconds = 600

        public let lostAfter: Duration
        public let gather: Duration

        /// Phrases waiting for the end of their gathering window.
        private var pending: [StatusPhrase] = []
        /// When the waiting phrases are spoken; nil while none wait.
        private var speakAt: Instant?
        /// When a connection still lost is spoken; nil while the uplink is not trying.
        private var lostAt: Instant?
        private var everConnected = false
        private var lostSpoken = false
        private var authSpoken = false
        private var tokenSpoken = false
        private var usageSpoken = false
        private var lowSpoken = false
        private var exhaustedSpoken = false
        private var cameraLost = false
        private var unavailableSpoken = false

        public init(lostAfter: Duration = .seconds(10), gather: Duration = .milliseconds(250)) {
            self.lostAfter = lostAfter
            self.gather = gather
        }

        /// When ``tick(now:)`` next has something to do; nil while nothing is pending.
        public var deadline: Instant? {
            switch (speakAt, lostAt) {
            case let (speak?, lost?): min(speak, lost)
            case let (speak, lost): speak ?? lost
            }
        }

        /// The utterance due by `now` (empty when none is).
        public mutating func tick(now: Instant) -> [StatusPhrase] {
            if let lostAt, lostAt <= now {
                self.lostAt = nil
                if !lostSpoken, !authSpoken, !tokenSpoken {
                    lostSpoken = true
                    announce([.connectionLost], now: lostAt)
                }
            }
            guard let speakAt, speakAt <= now else { return [] }
            return takePending()
        }

        public mutating func started(now: Instant) {
            announce([.ready], now: now)
        }

        public mutating func uplink(_ state: Uplink.ConnectionState, now: Instant) {
            switch state {
            case .connected:
                lostAt = nil
                authSpoken = false
                tokenSpoken = false
                if !everConnected || lostSpoken { announce([.connected], now: now) }
                everConnected = true
                lostSpoken = false
            case .authenticationFailed:
                lostAt = nil
                if !authSpoken { announce([.authenticationFailed], now: now) }
                authSpoken = true
            case .noToken:
                lostAt = nil
                if !tokenSpoken { announce([.noToken], now: now) }
                tokenSpoken = true
            case .connecting, .disconnected:
                guard lostAt == nil, !lostSpoken, !authSpoken, !tokenSpoken else { return }
                lostAt = now + lostAfter
            case .stopped, .parked:
                lostAt = nil
            }
        }

        /// `remainingSeconds` from a welcome (`nil`: unlimited) or a usage message.
        public mutating func usage(remainingSeconds: Int?, fromWelcome: Bool, now: Instant) {
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
            announce(phrases, now: now)
        }

        /// The server's model is down (`guidance_unavailable`).
        public mutating func guidanceUnavailable(now: Instant) {
            guard !unavailableSpoken else { return }
            unavailableSpoken = true
            announce([.guidanceUnavailable], now: now)
        }

        /// Guidance (or a clear road) arrived: the model answers again.
        public mutating func guidanceArrived() {
            unavailableSpoken = false
        }

        public mutating func camera(_ event: CameraEvent, now: Instant) {
            switch event {
            case .lost where !cameraLost:
                cameraLost = true
                announce([.cameraLost], now: now)
            case .back where cameraLost:
                cameraLost = false
                announce([.cameraBack], now: now)
            default:
                break
            }
        }

        /// A phrase whose once-only rule is kept elsewhere (the local guidance's), spoken at
        /// once with any gathered before it: the warnings that follow must come after it, not
        /// replace it. The utterance to speak now.
        public mutating func say(_ phrase: StatusPhrase) -> [StatusPhrase] {
            pending.append(phrase)
            return takePending()
        }

        private mutating func announce(_ phrases: [StatusPhrase], now: Instant) {
            guard !phrases.isEmpty else { return }
            pending += phrases
            if speakAt == nil { speakAt = now + gather }
        }

        private mutating func takePending() -> [StatusPhrase] {
            speakAt = nil
            defer { pending = [] }
            return pending
        }
    }
}
