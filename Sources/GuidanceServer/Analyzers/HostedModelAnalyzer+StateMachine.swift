extension HostedModelAnalyzer {
    /// The rules for calling a hosted model, with no sockets: which failures are tried again, how long
    /// to wait before the next try, when to give up (the request's deadline), and the circuit breaker
    /// that stops calling a service that is down.
    ///
    /// ``HostedModelAnalyzer`` asks ``admit(now:)`` before each request and reports every attempt's
    /// outcome to ``attempted(_:now:)``; between attempts it asks ``retry(after:attempt:now:deadline:jitter:)``.
    public struct StateMachine: Sendable {
        public struct Settings: Sendable, Equatable {
            /// Attempts per segment, the first included.
            public var maxAttempts = 3
            /// The first retry waits about this long; each next one twice as long.
            public var backoff: Duration = .milliseconds(250)
            /// No wait is longer than this, whatever the service asks.
            public var maxBackoff: Duration = .seconds(30)
            /// Segments in a row whose every attempt failed, after which the breaker opens.
            public var failuresToOpen = 3
            /// How long an open breaker refuses before it lets one probe through.
            public var openFor: Duration = .seconds(30)

            public init() {}
        }

        /// How one HTTP attempt ended.
        public enum Outcome: Sendable, Equatable {
            case answered
            /// An HTTP status other than 2xx; `retryAfter` is the service's own delay (a `Retry-After`
            /// header, or Google's `RetryInfo.retryDelay`), if it gave one.
            case status(Int, retryAfter: Duration?)
            /// No HTTP answer: connection refused or reset, TLS failure, the request's deadline.
            case transport
            /// A 2xx whose body is not the answer the schema asks for.
            case malformed

            /// 429, 500, 503 and 504 and failures below HTTP are worth another try; other 4xx are not.
            public var retryable: Bool {
                switch self {
                case .transport: true
                case .status(let code, _): [429, 500, 503, 504].contains(code)
                case .answered, .malformed: false
                }
            }

            /// Whether this says the service itself is in trouble (what the breaker counts).
            var serviceFailure: Bool { retryable }
        }

        public enum Admission: Sendable, Equatable {
            case call
            /// The breaker is open: answer "guidance unavailable" without calling.
            case refuse
        }

        public enum Breaker: Sendable, Equatable {
            case closed(failures: Int)
            case open(until: ContinuousClock.Instant)
            /// One probe is on its way; everyone else is refused until it ends.
            case probing
        }

        public let settings: Settings
        public private(set) var breaker: Breaker = .closed(failures: 0)
        /// Devices whose segments went to the service since its last answer, and those of them
        /// that failed: one device's odd segments (huge, or ones the service chokes on) are not the
        /// service being down, so failures open the breaker only when they come from two devices,
        /// or from the only device using it.
        private var seen: Set<String> = []
        private var failing: Set<String> = []

        public init(settings: Settings = Settings()) {
            self.settings = settings
        }

        /// Whether a new segment's request may go out now.
        public mutating func admit(device: String = "", now: ContinuousClock.Instant) -> Admission {
            if seen.count < 2 { seen.insert(device) }
            switch breaker {
            case .closed: return .call
            case .probing: return .refuse
            case .open(let until):
                guard now >= until else { return .refuse }
                breaker = .probing
                return .call
            }
        }

        /// A segment's request ended: answered (`succeeded`) or given up after its attempts. Only
        /// service failures move the breaker; a refused request (400) or an unreadable answer do not
        /// say the service is down.
        public mutating func finished(device: String = "", succeeded: Bool, lastOutcome: Outcome, now: ContinuousClock.Instant) {
            if succeeded || !lastOutcome.serviceFailure {
                breaker = .closed(failures: 0)
                seen = []
                failing = []
                return
            }
            if failing.count < 2 { failing.insert(device) }
            let others = failing.count >= 2 || seen.subtracting([device]).isEmpty
            switch breaker {
            case .closed(let failures) where failures + 1 < settings.failuresToOpen || !others:
                breaker = .closed(failures: failures + 1)
            case .closed, .probing, .open:
                breaker = .open(until: now.advanced(by: settings.openFor))
                seen = []
                failing = []
            }
        }

        /// A request ended with no verdict on the service (its session closed, or the clip could not
        /// be prepared): a probe that ended so lets the next segment probe instead.
        public mutating func abandoned(now: ContinuousClock.Instant) {
            if breaker == .probing { breaker = .open(until: now) }
        }

        /// After a failed attempt (`attempt` counts from 1): the wait before the next one, or nil to
        /// give up. The wait is the service's delay when it gave one, else exponential backoff with
        /// full jitter (`jitter` in 0…1), and never ends past `deadline`.
        public func retry(
            after outcome: Outcome, attempt: Int, now: ContinuousClock.Instant,
            deadline: ContinuousClock.Instant, jitter: Double
        ) -> Duration? {
            guard outcome.retryable, attempt < settings.maxAttempts else { return nil }
            let wait: Duration
            if case .status(_, let asked?) = outcome {
                wait = min(max(asked, .zero), settings.maxBackoff)
            } else {
                let doubling = min(attempt - 1, 16)
                let ceiling = min(settings.backoff * (1 << doubling), settings.maxBackoff)
                wait = ceiling * min(max(jitter, 0), 1)
            }
            guard now.advanced(by: wait) < deadline else { return nil }
            return wait
        }
    }
}
