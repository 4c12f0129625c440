public import RoadScene

extension LocalGuidance {
    /// When the device guides the driver itself, and what it says: a pure state machine, fed the
    /// uplink's sessions, the usage the server reports, the clock and the local findings, and
    /// answering with what to do. No clock, socket or thread of its own; ``LocalGuidance`` runs it.
    ///
    /// - Local guidance starts once there has been no session for `offlineAfter` (from the start, or
    ///   from the moment the last session ended), when the server says the usage is exhausted, or
    ///   when it says its model service is down (`guidance_unavailable`); it stops as soon as a
    ///   session is open, usage is available and guidance arrives again.
    /// - Each start says ``StatusPhrase/guidanceLocal`` once, each stop ``StatusPhrase/guidanceFromServer``
    ///   once. The news of the start waits for the first look (at most ``introHold``) and goes with
    ///   its warning in one utterance: said one after the other, the warning would replace the news
    ///   still waiting behind whatever is being spoken. A stop before the news was said says nothing.
    /// - A finding is warned about when it is first seen, and again only once `repeatAfter` has
    ///   passed since it was last spoken, whether it stayed in view or went and came back.
    public struct StateMachine: Sendable {
        public struct Settings: Sendable, Equatable {
            public var enabled: Bool
            public var offlineAfter: Duration
            public var repeatAfter: Duration
        }

        public enum Reason: String, Sendable, Equatable {
            case noSession = "no session"
            case usageExhausted = "usage exhausted"
            case guidanceUnavailable = "guidance unavailable"
        }

        public enum Action: Sendable, Equatable {
            /// Start looking at frames (local guidance is on).
            case startLooking(Reason)
            /// Stop looking (the server guides again, or the switch was turned off).
            case stopLooking
            case announce(StatusPhrase)
            /// Speak this finding now, after `phrases` in the same utterance.
            case warn(RoadFinding, after: [StatusPhrase] = [])
        }

        /// How long the news that the device warns by itself waits for the first look.
        public static let introHold = Duration.seconds(2)

        public typealias Instant = ContinuousClock.Instant

        public private(set) var settings: Settings
        /// Why local guidance is on; nil while it is off.
        public private(set) var active: Reason?
        private var sessionOpen = false
        /// When the last session ended, or the agent started.
        private var withoutSessionSince: Instant
        private var exhausted = false
        private var modelDown = false
        private var spokenAt: [RoadFinding: Instant] = [:]
        /// Until when the news of the start waits for a warning to go with; nil once said.
        private var introUntil: Instant?

        public init(settings: Settings, now: Instant) {
            self.settings = settings
            withoutSessionSince = now
        }

        /// When ``tick(now:)`` next has something to decide; nil while nothing is pending.
        public var deadline: Instant? {
            if let introUntil { return introUntil }
            guard settings.enabled, active == nil, !sessionOpen else { return nil }
            return withoutSessionSince + settings.offlineAfter
        }

        public mutating func sessionOpened(now: Instant) -> [Action] {
            sessionOpen = true
            return decide(now: now)
        }

        /// The session ended, or an attempt to open one failed (it was not open to begin with).
        public mutating func sessionClosed(now: Instant) -> [Action] {
            if sessionOpen {
                sessionOpen = false
                withoutSessionSince = now
            }
            return decide(now: now)
        }

        /// What the server says of the usage: `remainingSeconds` nil is unlimited, 0 or less is exhausted.
        public mutating func usage(remainingSeconds: Int?, now: Instant) -> [Action] {
            exhausted = remainingSeconds.map { $0 <= 0 } ?? false
            return decide(now: now)
        }

        /// The server's model service is down (`true`), or guidance came from it again (`false`).
        public mutating func guidanceUnavailable(_ unavailable: Bool, now: Instant) -> [Action] {
            modelDown = unavailable
            return decide(now: now)
        }

        public mutating func tick(now: Instant) -> [Action] {
            if let until = introUntil, now >= until { return sayIntro() + decide(now: now) }
            return decide(now: now)
        }

        /// A new `settings` (SIGHUP): turning the switch off stops local guidance at once.
        public mutating func reconfigure(_ settings: Settings, now: Instant) -> [Action] {
            self.settings = settings
            return decide(now: now)
        }

        /// What the latest frame showed; ignored while local guidance is off (a look that was
        /// running when it stopped).
        public mutating func looked(_ finding: RoadFinding?, now: Instant) -> [Action] {
            guard active != nil else { return [] }
            guard let finding, spokenAt[finding].map({ now - $0 >= settings.repeatAfter }) ?? true else { return sayIntro() }
            spokenAt[finding] = now
            let news: [StatusPhrase] = introUntil == nil ? [] : [.guidanceLocal]
            introUntil = nil
            return [.warn(finding, after: news)]
        }

        private mutating func sayIntro() -> [Action] {
            guard introUntil != nil else { return [] }
            introUntil = nil
            return [.announce(.guidanceLocal)]
        }

        private mutating func decide(now: Instant) -> [Action] {
            let wanted: Reason? =
                if !settings.enabled {
                    nil
                } else if exhausted {
                    .usageExhausted
                } else if modelDown {
                    .guidanceUnavailable
                } else if !sessionOpen && now - withoutSessionSince >= settings.offlineAfter {
                    .noSession
                } else {
                    nil
                }
            switch (active, wanted) {
            case (nil, let reason?):
                active = reason
                introUntil = now + Self.introHold
                return [.startLooking(reason)]
            case (_?, nil):
                active = nil
                // Turned off by the switch, nothing came back; and the driver who never heard that
                // the device warns by itself needs no news that the server does again.
                let unsaid = introUntil != nil
                introUntil = nil
                return settings.enabled && !unsaid ? [.stopLooking, .announce(.guidanceFromServer)] : [.stopLooking]
            case (_?, let reason?):
                active = reason
                return []
            case (nil, nil):
                return []
            }
        }
    }
}
