public import GuidanceProtocol
import HAL
public import Logging

/// One connection attempt to the server, numbered in the order they were made.
public struct SessionID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let number: Int
    public init(_ number: Int) { self.number = number }
    public static func < (a: Self, b: Self) -> Bool { a.number < b.number }
    public var description: String { "#\(number)" }
}

/// Why a connection attempt gave no session.
public enum ConnectFailure: Sendable, Equatable {
    /// The server answered the upgrade with this HTTP status; `retryAfter` from its header.
    case refused(status: Int, retryAfter: Duration?)
    /// Connect, TLS and upgrade did not finish within `uplink.connectTimeoutMs`.
    case timedOut
    /// DNS, TCP or TLS failed.
    case unreachable(String)
    /// No token to send: the token file is missing, empty, unreadable or open to others.
    case noToken(String)
}

extension Uplink {
    /// The uplink's rules, apart from any socket: events in, actions out.
    ///
    /// It decides when to open a session and when to give one up (network change, silence, a
    /// close or a refused upgrade), which segment goes next and which come back for a re-send,
    /// when uploads pause, which guidance is too old to speak, and when a shutdown has drained.
    /// ``Uplink`` only performs the actions. Time is passed in (`CLOCK_MONOTONIC` nanoseconds,
    /// the clock segments are stamped with), so every rule is tested without waiting.
    public struct StateMachine: Sendable {
        public struct Settings: Sendable {
            public var backoff: Backoff
            /// A session with something outstanding that hears nothing for this long is given up.
            public var liveness: Duration
            /// The agent's ping period; with nothing outstanding, two periods of silence end a session.
            public var ping: Duration
            /// How long an old session gets for its close handshake before its socket is closed.
            public var closeGrace: Duration = .seconds(1)
            /// How long a shutdown waits for the last acknowledgements and guidance.
            public var drain: Duration
            public var guidanceMaxAge: Duration
            public var queueSegments: Int
            public var queueMaxAgeMs: Int
            /// After 401/403 or close 4401: a long wait, with jitter.
            public var authFailureWait: Duration = .seconds(60)
            /// A `Retry-After` longer than this is not believed.
            public var retryAfterCap: Duration = .seconds(600)
            /// Without a usable token file: how soon it is read again (someone may be fixing it).
            public var tokenRetry: Duration = .seconds(30)
            /// After close 1012 (the server is restarting): the reconnect waits a random time up to
            /// this, so that the server's fleet comes back spread out, not all in the same second.
            public var restartSpread: Duration
            /// The clips' budget and network (`upload.*`).
            public var clips: ClipUploads.StateMachine.Settings
            /// The segments' length (`encoder.segmentSeconds`): their pace until two have come.
            public var segmentPeriod: Duration?

            /// The defaults, for the configuration's.
            public static let standard = Settings()

            /// Unset `liveness`: two ping periods, at most 10 s.
            public init(
                backoff: Backoff = Backoff(), liveness: Duration? = nil, ping: Duration = .seconds(4),
                drain: Duration = .milliseconds(1500), guidanceMaxAge: Duration = .seconds(10),
                queueSegments: Int = 3, queueMaxAgeMs: Int = 15_000, restartSpread: Duration = .seconds(10),
                clips: ClipUploads.StateMachine.Settings = .init(), segmentPeriod: Duration? = nil
            ) {
                self.backoff = backoff
                self.liveness = liveness ?? min(ping * 2, .seconds(10))
                self.ping = ping
                self.drain = drain
                self.guidanceMaxAge = guidanceMaxAge
                self.queueSegments = queueSegments
                self.queueMaxAgeMs = queueMaxAgeMs
                self.restartSpread = restartSpread
                self.clips = clips
                self.segmentPeriod = segmentPeriod
            }
        }

        public enum Action: Sendable, Equatable {
            /// Open a new session now (a connection attempt with its own deadline).
            case connect(SessionID)
            /// Segments are waiting and the session may send them.
            case wakeSender(SessionID)
            /// Send a close frame, allow `grace` for the handshake, then close the socket.
            case close(SessionID, code: CloseCode, grace: Duration)
            /// Close the socket now: the session is given up, whatever it was doing.
            case cancel(SessionID)
            case report(ConnectionState)
            /// A message for the guidance router.
            case deliver(ServerMessage)
            case log(Logger.Level, String)
            /// The server holds every file of the clip: it leaves the car's custody.
            case clipStored(String)
            /// Nothing is left to do: `run` returns.
            case finish
        }

        private struct Session {
            let id: SessionID
            var opened = false
            var welcomed = false
            var openedAt: UInt64 = 0
            var lastHeard: UInt64 = 0
            /// Since when something (a welcome, an ack) has been awaited without pause.
            var awaitingSince: UInt64?
            var reportedUnknownAck = false
        }

        private enum Stopping {
            case running
            case draining(until: UInt64)
            case closing
            case finished
        }

        public let settings: Settings
        public private(set) var custody: Custody
        /// The clips owed to the owner's server, sent between segments on the same session.
        public private(set) var clips: ClipUploads.StateMachine
        /// The segments' pace, for the clips' quiet time (``segmentDueSoon(now:)``): when the last
        /// one came, and the time between the last two.
        private var lastSegmentAt: UInt64?
        private var segmentPeriod: UInt64?
        /// When the part awaiting its answer was sent, and the round trip of parts lately (the
        /// longest, decaying by an eighth at each new one).
        private var partSentAt: UInt64?
        private var partFinishedFile = false
        public private(set) var partRoundTrip: UInt64 = 0
        /// The same for a file's last part, which the server answers only once it has checked the
        /// file's SHA-256 and made it durable (tens to hundreds of ms for a big file).
        public private(set) var finishRoundTrip: UInt64?
        /// Parts are held back until then (a segment is due); the sender is woken at that time
        /// if the segment has not come.
        private var clipHoldUntil: UInt64?
        public private(set) var stats = Stats()
        /// Uploads stop on 4402 (usage exhausted) until usage comes back; recording goes on.
        public private(set) var paused = false
        /// The car is parked: no session until driving resumes (``park(now:)``).
        public private(set) var parked = false
        public private(set) var state = ConnectionState.connecting
        private var backoff: Backoff
        private var random: @Sendable (ClosedRange<Double>) -> Double
        private var current: Session?
        /// Sessions given up and closing: their acks and guidance still count.
        private var closing: Set<SessionID> = []
        private var nextNumber = 0
        private var retryAt: UInt64?
        private var stopping = Stopping.running
        /// Capture times of segments sent, for the stale-guidance rule.
        private var captureTimes: [Int: UInt64] = [:]
        /// When segments sent were closed, for the acknowledgement's delay in the log.
        private var closeTimes: [Int: UInt64] = [:]
        /// Acknowledged segments whose guidance has not come yet (a drain waits for them).
        private var awaitingGuidance: [Int: UInt64] = [:]
        private var notFoundLog = RateLimit(interval: .seconds(60))
        /// The token problem last logged: the same one again is not logged every retry.
        private var tokenProblemLogged: String?
        private var dropLog = RateLimit(interval: .seconds(10))
        /// `stats.dropped` when the log last heard of drops: a line counts those it did not hear of.
        private var droppedLogged = 0
        /// Incidents to tell the server, by id: the newest message of each, when it came, and the
        /// session that last sent it.
        private var incidents: [String: (message: ClientMessage.Incident, at: UInt64, sentOn: SessionID?)] = [:]
        /// How long an incident is told again on every new session (a server that missed it
        /// while the link was down hears of it on the next one).
        public static let incidentMemory = Duration.seconds(600)
        public static let maxIncidents = 16

        public init(settings: Settings, random: @escaping @Sendable (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) {
            self.settings = settings
            self.backoff = settings.backoff
            self.random = random
            self.custody = Custody(maxCount: settings.queueSegments, maxAgeMs: settings.queueMaxAgeMs)
            self.clips = ClipUploads.StateMachine(settings: settings.clips)
        }

        /// The session segments go to, once it has said `hello`.
        public var currentSession: SessionID? { current?.id }
        public var sessionOpenedAt: UInt64? { current.flatMap { $0.opened ? $0.openedAt : nil } }
        public var isFinished: Bool { if case .finished = stopping { true } else { false } }

        /// The earliest time ``tick(now:)`` has something to do, if any.
        public var nextDeadline: UInt64? {
            var times: [UInt64] = []
            if let retryAt { times.append(retryAt) }
            if case .draining(let until) = stopping { times.append(until) }
            if let session = current, session.opened {
                times.append(session.lastHeard + (session.awaitingSince != nil ? settings.liveness : settings.ping * 2).ns)
            }
            if let clipHoldUntil { times.append(clipHoldUntil) }
            return times.min()
        }

        // MARK: - Starting and stopping

        public mutating func start(now: UInt64) -> [Action] {
            openSession(now: now)
        }

        /// SIGTERM or the last segment: send what is held, wait (bounded) for acks and guidance, close with 1001.
        public mutating func shutdown(now: UInt64) -> [Action] {
            guard case .running = stopping else { return [] }
            retryAt = nil
            // Guidance that would be stale by now is not worth waiting for (a server may send none).
            awaitingGuidance = awaitingGuidance.filter { now - min(now, $0.value) < settings.guidanceMaxAge.ns }
            if let session = current, !(custody.isEmpty && awaitingGuidance.isEmpty) {
                stopping = .draining(until: now + settings.drain.ns)
                return session.opened && !paused ? [.wakeSender(session.id)] : []
            }
            return closeAll()
        }

        private mutating func closeAll() -> [Action] {
            stopping = .closing
            closeClips()
            var actions: [Action] = []
            if let session = current {
                current = nil
                if session.opened {
                    closing.insert(session.id)
                    actions.append(.close(session.id, code: .goingAway, grace: min(settings.closeGrace, .milliseconds(500))))
                } else {
                    actions.append(.cancel(session.id))
                }
            }
            return actions + finishIfDone()
        }

        private mutating func finishIfDone() -> [Action] {
            guard case .closing = stopping, current == nil, closing.isEmpty else { return [] }
            stopping = .finished
            return report(.stopped) + [.finish]
        }

        private mutating func drainedIfDone() -> [Action] {
            guard case .draining = stopping, custody.isEmpty, awaitingGuidance.isEmpty else { return [] }
            return closeAll()
        }

        // MARK: - Parking

        /// The car is parked: the session closes (1001) and none opens, whatever the network
        /// does, until ``drive(now:)``. What is held stays held (on disk too) for then.
        public mutating func park(now: UInt64) -> [Action] {
            guard case .running = stopping, !parked else { return [] }
            parked = true
            retryAt = nil
            closeClips()
            var actions: [Action] = [.log(.notice, "the car is parked: no session until it drives again")]
            if let session = current {
                current = nil
                if session.opened {
                    closing.insert(session.id)
                    actions.append(.close(session.id, code: .goingAway, grace: settings.closeGrace))
                } else {
                    actions.append(.cancel(session.id))
                }
            }
            return actions + report(.parked)
        }

        /// Driving again: a session opens at once.
        public mutating func drive(now: UInt64) -> [Action] {
            guard parked else { return [] }
            parked = false
            guard case .running = stopping, current == nil else { return [] }
            backoff.reset()
            retryAt = nil
            return openSession(now: now)
        }

        // MARK: - Segments

        public mutating func segment(_ segment: Segment, now: UInt64) -> [Action] {
            if let last = lastSegmentAt, now > last {
                // Between 0.1 s and a minute: anything else is a pause (parking, a stall), not a pace.
                let interval = now - last
                segmentPeriod = (100_000_000...60_000_000_000).contains(interval) ? interval : nil
            }
            lastSegmentAt = now
            clipHoldUntil = nil
            var actions = countDrops(custody.push(segment, now: now), now: now)
            if let session = current, session.opened, !paused { actions.append(.wakeSender(session.id)) }
            return actions
        }

        // MARK: - Incidents

        /// An incident the G-sensor saved, or its newer state (the same id): told on the session
        /// open now, and on every session opened within ``incidentMemory``.
        public mutating func incident(_ message: ClientMessage.Incident, now: UInt64) -> [Action] {
            incidents[message.id] = (message, now, nil)
            forgetOldIncidents(now: now)
            if let session = current, session.opened, !paused { return [.wakeSender(session.id)] }
            return []
        }

        /// The incident messages `session` has not sent yet, oldest first, now counted as sent on it.
        public mutating func incidentsToSend(session id: SessionID, now: UInt64) -> [ClientMessage.Incident] {
            guard let session = current, session.id == id, session.opened, !paused, !isClosingDown else { return [] }
            forgetOldIncidents(now: now)
            let due = incidents.filter { $0.value.sentOn != id }.sorted { $0.value.at < $1.value.at }
            for (key, _) in due { incidents[key]?.sentOn = id }
            return due.map(\.value.message)
        }

        private mutating func forgetOldIncidents(now: UInt64) {
            incidents = incidents.filter { now - min(now, $0.value.at) < Self.incidentMemory.ns }
            while incidents.count > Self.maxIncidents, let oldest = incidents.min(by: { $0.value.at < $1.value.at }) {
                incidents[oldest.key] = nil
            }
        }

        /// What `session` sends next, if anything; the segment is then in flight until its `ack`.
        public mutating func nextToSend(session id: SessionID, now: UInt64) -> (segment: Segment?, actions: [Action]) {
            guard let session = current, session.id == id, session.opened, !paused, !isClosingDown else { return (nil, []) }
            let highestSent = custody.highestSent
            let (next, dropped) = custody.takeNext(now: now)
            let actions = countDrops(dropped, now: now)
            if let next {
                if let highestSent, next.metadata.seq <= highestSent { stats.resent += 1 }
                captureTimes[next.metadata.seq] = next.metadata.captureStartMonotonicNs
                if captureTimes.count > 64, let oldest = captureTimes.keys.min() { captureTimes[oldest] = nil }
                closeTimes[next.metadata.seq] = next.closedMonotonicNs
                if closeTimes.count > 64, let oldest = closeTimes.keys.min() { closeTimes[oldest] = nil }
                if current?.awaitingSince == nil { current?.awaitingSince = now }
            }
            return (next, actions)
        }

        /// Every drop is counted; the log hears of them at most once per 10 s, however fast they
        /// come, each line with the drops since the one before.
        private mutating func countDrops(_ count: Int, now: UInt64) -> [Action] {
            stats.dropped = custody.dropped
            guard count > 0, dropLog.allows(now: now) else { return [] }
            let since = stats.dropped - droppedLogged
            droppedLogged = stats.dropped
            return [.log(.warning, "dropped \(since) segment(s) not delivered in time, kept on disk (\(stats.dropped) in all)")]
        }

        /// A segment's last byte was written.
        public mutating func sent(session id: SessionID) {
            stats.sent += 1
        }

        private var isClosingDown: Bool {
            switch stopping {
            case .running, .draining: false
            case .closing, .finished: true
            }
        }

        // MARK: - Clips

        /// A clip to upload (``ClipUploads/StateMachine/add(_:)``): announced on the session open
        /// now, if any, and on every new one until the server has stored it.
        public mutating func clip(_ clip: ClientMessage.Clip, now: UInt64) -> [Action] {
            clips.add(clip)
            if let session = current, session.opened, !paused { return [.wakeSender(session.id)] }
            return []
        }

        /// A clip whose files are gone from the card: it cannot be sent.
        public mutating func withdrawClip(_ id: String) -> [Action] {
            clips.withdraw(id)
            return [.clipStored(id)]
        }

        /// The uplink's interface is (or is not) a wireless LAN (`upload.when: wifi`).
        public mutating func network(wifi: Bool) -> [Action] {
            let was = clips.onWifi
            clips.network(wifi: wifi)
            if wifi, !was, let session = current, session.opened, !paused { return [.wakeSender(session.id)] }
            return []
        }

        /// The clip message `session` sends next, if any: only while the session is open and not
        /// draining, and a part only while no segment waits to be sent (the road goes first).
        /// `day` is the local calendar day, for `upload.dailyMegabytes`.
        public mutating func nextClipMessage(session id: SessionID, day: Int, now: UInt64) -> ClipUploads.StateMachine.Send? {
            guard let session = current, session.id == id, session.opened, !paused, case .running = stopping else { return nil }
            let finishes = clips.upcomingPart?.finishesFile ?? false
            let dueSoon = segmentDueSoon(now: now, finishingAFile: finishes)
            if let dueSoon, clips.whyWaiting(segmentsWaiting: false) == .nothing { clipHoldUntil = dueSoon }
            let send = clips.next(segmentsWaiting: !custody.unsent.isEmpty || dueSoon != nil, day: day)
            if send != nil, current?.awaitingSince == nil { current?.awaitingSince = now }
            if case .part = send {
                partSentAt = now
                partFinishedFile = finishes
            }
            return send
        }

        /// A live segment is due before a part could be sent and answered: nil, or until when
        /// parts wait for it. The next segment is due a period after the last; a part is let go
        /// only if twice its expected round trip (at least 20 ms) fits before that, so the segment
        /// finds the link and the server's session clear and its acknowledgement is not held up
        /// behind a clip. A file's last part expects the longer round trip of the server's check
        /// (four times a part's until one was seen). A segment later than half a period is not
        /// waited for any longer.
        ///
        /// Before the first segment its time is not known: parts wait for it, up to two
        /// segments' length after the session opened (a camera that gives none does not hold the
        /// clips back for ever).
        public func segmentDueSoon(now: UInt64, finishingAFile: Bool = false) -> UInt64? {
            guard let period = segmentPeriod ?? settings.segmentPeriod?.ns, period > 0 else { return nil }
            guard let last = lastSegmentAt else {
                guard let opened = current?.openedAt else { return nil }
                let until = opened + 2 * period
                return now < until ? until : nil
            }
            let due = last + period, giveUp = due + period / 2
            let trip = finishingAFile ? max(finishRoundTrip ?? 4 * partRoundTrip, partRoundTrip) : partRoundTrip
            let margin = max(2 * trip, 20_000_000)
            return now + margin >= due && now < giveUp ? giveUp : nil
        }

        /// The session ends: what it did not answer is asked again on the next.
        private mutating func closeClips() {
            clips.closed()
            partSentAt = nil
            partFinishedFile = false
            clipHoldUntil = nil
        }

        /// The answer to a part came: its round trip counts.
        private mutating func partAnswered(now: UInt64) {
            guard let sent = partSentAt else { return }
            partSentAt = nil
            let trip = now > sent ? now - sent : 0
            if partFinishedFile {
                // The last file's check: its size decides, so the latest one counts.
                finishRoundTrip = trip
            } else {
                partRoundTrip = max(trip, partRoundTrip - partRoundTrip / 8)
            }
        }

        /// Nothing outstanding (no segment in flight, no clip answer awaited, welcomed): the
        /// silence clock stops; otherwise it restarts at this answer.
        private mutating func settle(now: UInt64) {
            let idle = custody.inFlight.isEmpty && !clips.awaitingAnswer && current?.welcomed == true
            current?.awaitingSince = idle ? nil : now
        }

        private func clipEvents(_ events: [ClipUploads.StateMachine.Event]) -> [Action] {
            events.flatMap { event -> [Action] in
                switch event {
                case .stored(let id):
                    return [.log(.notice, "clip \(id) is stored on the server"), .clipStored(id)]
                case .dropped(let clip, let file):
                    return [
                        .log(
                            .warning,
                            "the server dropped what it held of clip \(clip)'s \(file) (its bytes did not match); sending it again")
                    ]
                case .resuming(let clip, let held, let bytes):
                    return [.log(.notice, "clip \(clip): the server holds \(held) of its \(bytes) bytes; the upload goes on from there")]
                case .refused(let clip, let reason, let setAside):
                    return [
                        .log(
                            .warning,
                            "the server refused clip \(clip): \(reason)"
                                + (setAside ? "; tried again on the next session" : "; announcing it again"))
                    ]
                }
            }
        }

        // MARK: - Session events

        /// The upgrade succeeded and `hello` was written.
        public mutating func opened(_ id: SessionID, now: UInt64) -> [Action] {
            guard current?.id == id else { return [] }
            tokenProblemLogged = nil
            current?.opened = true
            current?.openedAt = now
            current?.lastHeard = now
            current?.awaitingSince = now
            stats.sessions += 1
            clips.opened()
            return !paused && !(custody.isEmpty && clips.waiting.isEmpty) ? [.wakeSender(id)] : []
        }

        public mutating func connectFailed(_ id: SessionID, _ failure: ConnectFailure, now: UInt64) -> [Action] {
            guard current?.id == id else { return [] }
            current = nil
            if isClosingDown { return finishIfDone() }
            if case .draining = stopping { return closeAll() }
            if case .noToken(let problem) = failure { return noToken(problem, now: now) }
            stats.reconnects += 1
            switch failure {
            case .refused(let status, _) where status == 401 || status == 403:
                let delay = authWait()
                return [
                    .log(
                        .error,
                        "authentication failed: the server refused the upgrade with HTTP \(status) (check uplink.tokenFile); retrying in \(delay.logText)"
                    )
                ]
                    + retry(after: delay, now: now, authentication: true)
            case .refused(404, _):
                // A wrong path or host: retrying soon will not fix it, and a log line a minute is enough.
                let delay = settings.backoff.cap * random(0.75...1.0)
                var actions: [Action] = []
                if notFoundLog.allows(now: now) {
                    actions.append(
                        .log(
                            .error,
                            "the server has no guidance stream at this URL (HTTP 404): check uplink.url; retrying in \(delay.logText)"))
                }
                return actions + retry(after: delay, now: now)
            case .refused(let status, let retryAfter):
                // Retry-After is the server's instruction: never sooner, and up to half as long
                // again at random, so the cars it refused together do not all come back together.
                var delay = nextBackoff(lived: nil)
                if let retryAfter { delay = max(delay, min(retryAfter, settings.retryAfterCap) * random(1.0...1.5)) }
                return [
                    .log(
                        .warning,
                        "the server refused the upgrade with HTTP \(status)\(retryAfter.map { " (Retry-After \($0.logText))" } ?? ""); retrying in \(delay.logText)"
                    )
                ]
                    + retry(after: delay, now: now)
            case .timedOut:
                let delay = nextBackoff(lived: nil)
                return [.log(.warning, "no session within the connect deadline (connect, TLS and upgrade); retrying in \(delay.logText)")]
                    + retry(after: delay, now: now)
            case .unreachable(let reason):
                let delay = nextBackoff(lived: nil)
                return [.log(.warning, "cannot reach the server: \(reason); retrying in \(delay.logText)")] + retry(after: delay, now: now)
            case .noToken:
                return []  // handled above
            }
        }

        /// Nothing was sent (not a reconnect): recording goes on, and the file is read again after
        /// ``Settings/tokenRetry``. The same problem is logged once, not at every retry.
        private mutating func noToken(_ problem: String, now: UInt64) -> [Action] {
            let delay = settings.tokenRetry
            var actions: [Action] = []
            if tokenProblemLogged != problem {
                tokenProblemLogged = problem
                actions.append(
                    .log(
                        .error,
                        "no guidance until the device has a token: \(problem); recording goes on, the file is read again every \(delay.logText)"
                    ))
            }
            retryAt = now + delay.ns
            return actions + report(.noToken(problem: problem, retryIn: delay))
        }

        /// The session's connection ended: the peer's close code, or `nil` if it just dropped.
        public mutating func ended(_ id: SessionID, code: UInt16?, now: UInt64) -> [Action] {
            if closing.remove(id) != nil { return finishIfDone() }
            guard let session = current, session.id == id else { return [] }
            current = nil
            custody.takeBackInFlight()
            closeClips()
            if isClosingDown { return finishIfDone() }
            if case .draining = stopping { return closeAll() }
            stats.reconnects += 1
            let lived = Duration.nanoseconds(Int64(clamping: now - session.openedAt))
            let codeText = code.map { "\($0)" } ?? "no close code: the connection dropped"
            switch code {
            case CloseCode.unauthorized.rawValue?:
                let delay = authWait()
                return [.log(.error, "authentication failed (the server closed with 4401); retrying in \(delay.logText)")]
                    + retry(after: delay, now: now, authentication: true)
            case CloseCode.serviceRestart.rawValue?:
                // Every car of this server heard the same close at the same moment: without a spread
                // they would all be back within the first backoff (250 ms), thousands of session
                // starts at once on a server that has just started. The session was healthy (the
                // server ended it), so a failed attempt after the wait backs off from the start.
                backoff.reset()
                let delay = settings.restartSpread * random(0...1)
                return [
                    .log(
                        .notice,
                        "the server is restarting (close 1012); reconnecting in \(delay.logText) (a random wait up to \(settings.restartSpread.logText), so its cars come back spread out)"
                    )
                ]
                    + retry(after: delay, now: now)
            case CloseCode.quotaExhausted.rawValue?:
                paused = true
                fallthrough
            default:
                let delay = nextBackoff(lived: lived)
                return [.log(.warning, "session closed (\(codeText)); reconnecting in \(delay.logText)")] + retry(after: delay, now: now)
            }
        }

        /// A pong, or any frame from the server: it is alive.
        public mutating func heard(_ id: SessionID, now: UInt64) {
            if current?.id == id { current?.lastHeard = now }
        }

        public mutating func received(_ message: ServerMessage, on id: SessionID, now: UInt64) -> [Action] {
            let isCurrent = current?.id == id
            guard isCurrent || closing.contains(id) else { return [] }
            if isCurrent { current?.lastHeard = now }
            switch message {
            case .welcome(let session, let remaining):
                guard isCurrent else { return [] }
                current?.welcomed = true
                if custody.inFlight.isEmpty, !clips.awaitingAnswer { current?.awaitingSince = nil }
                return [.log(.info, "session \(session) open")] + report(.connected(session: session)) + resume(remaining: remaining)
                    + [.deliver(message)]
            case .ack(let seq):
                var actions: [Action] = []
                switch custody.acknowledge(seq: seq) {
                case .released:
                    stats.acked += 1
                    if let closed = closeTimes.removeValue(forKey: seq), now > closed {
                        actions.append(
                            .log(.debug, "segment \(seq) acknowledged \(Double((now - closed) / 1000) / 1000) ms after it closed"))
                    }
                    awaitingGuidance[seq] = now
                    if awaitingGuidance.count > 16, let oldest = awaitingGuidance.keys.min() { awaitingGuidance[oldest] = nil }
                case .late:
                    actions.append(.log(.debug, "ack for segment \(seq), which is no longer held (acknowledged before, or dropped)"))
                case .unknown:
                    if isCurrent, current?.reportedUnknownAck == false {
                        current?.reportedUnknownAck = true
                        actions.append(
                            .log(
                                .warning, "the server acknowledged segment \(seq), which was never sent; ignored (logged once per session)")
                        )
                    }
                }
                // Progress: the silence clock restarts, and stops once nothing is awaited.
                if isCurrent { settle(now: now) }
                return actions + [.deliver(message)] + drainedIfDone()
            case .guidance(let guidance):
                awaitingGuidance[guidance.seq] = nil
                if let captured = captureTimes[guidance.seq], now > captured, now - captured > settings.guidanceMaxAge.ns {
                    stats.staleGuidance += 1
                    return [.log(.notice, "dropped stale guidance for segment \(guidance.seq)")] + drainedIfDone()
                }
                return [.deliver(message)] + drainedIfDone()
            case .usage(let remaining):
                return resume(remaining: remaining) + [.deliver(message)]
            case .error(.badClip, let text, _):
                guard isCurrent else { return [] }
                partAnswered(now: now)
                let events = clips.refused(text)
                settle(now: now)
                return clipEvents(events) + [.wakeSender(id)]
            case .error(let code, let text, let seq):
                if let seq { awaitingGuidance[seq] = nil }
                if code == .quotaExhausted { paused = true }
                return [.log(.warning, "server error \(code.rawValue): \(text)\(seq.map { " (segment \($0))" } ?? "")"), .deliver(message)]
                    + drainedIfDone()
            case .clipHave(let have):
                guard isCurrent else { return [] }
                partAnswered(now: now)
                let events = clips.heard(have)
                settle(now: now)
                return clipEvents(events) + [.wakeSender(id)]
            case .unknown(let type):
                return [.log(.debug, "ignoring message type \(type)")]
            }
        }

        /// A token became available (a car just paired): a connection waiting for one is tried at
        /// the next tick instead of after ``Settings/tokenRetry``.
        public mutating func tokenAvailable(now: UInt64) -> [Action] {
            guard case .running = stopping, current == nil, retryAt != nil else { return [] }
            backoff.reset()
            retryAt = now
            return []
        }

        /// The default route or its addresses changed: make before break.
        public mutating func networkChanged(_ description: String, now: UInt64) -> [Action] {
            guard case .running = stopping else { return [] }
            backoff.reset()
            return [.log(.notice, "network changed (\(description)); opening a new session")] + abandonCurrent(now: now)
        }

        /// Deadlines: a retry that is due, a silent session, a drain that ran out.
        public mutating func tick(now: UInt64) -> [Action] {
            var woken: [Action] = []
            if let hold = clipHoldUntil, now >= hold {
                // The segment the parts waited for did not come: they go on.
                clipHoldUntil = nil
                if let session = current, session.opened, !paused { woken = [.wakeSender(session.id)] }
            }
            return woken + deadlines(now: now)
        }

        private mutating func deadlines(now: UInt64) -> [Action] {
            if case .draining(let until) = stopping, now >= until {
                return [.log(.notice, "shutdown: \(custody.count) segment(s) not acknowledged within \(settings.drain.logText); closing")]
                    + closeAll()
            }
            if let due = retryAt, now >= due, current == nil {
                retryAt = nil
                return openSession(now: now)
            }
            guard let session = current, session.opened else { return [] }
            let silent = now - min(now, session.lastHeard)
            if let since = session.awaitingSince, silent >= settings.liveness.ns, now - min(now, since) >= settings.liveness.ns / 2 {
                let what =
                    !custody.inFlight.isEmpty
                    ? "\(custody.inFlight.count) unacknowledged segment(s)"
                    : clips.awaitingAnswer ? "a clip's answer" : "the welcome"
                stats.reconnects += 1
                return [
                    .log(
                        .warning,
                        "no answer from the server for \(Duration.nanoseconds(Int64(clamping: silent)).logText) with \(what) outstanding; opening a new session"
                    )
                ]
                    + abandonCurrent(now: now)
            }
            if session.awaitingSince == nil, silent >= (settings.ping * 2).ns {
                stats.reconnects += 1
                return [.log(.warning, "no pong within two ping periods; opening a new session")] + abandonCurrent(now: now)
            }
            return []
        }

        // MARK: - Helpers

        /// Gives up the current session (a 1001 close with a short grace, or a cancel if it never
        /// opened) and opens a new one at once; what it did not acknowledge goes first on the new one.
        private mutating func abandonCurrent(now: UInt64) -> [Action] {
            var actions: [Action] = []
            if let session = current {
                current = nil
                custody.takeBackInFlight()
                closeClips()
                if session.opened {
                    closing.insert(session.id)
                    actions.append(.close(session.id, code: .goingAway, grace: settings.closeGrace))
                } else {
                    actions.append(.cancel(session.id))
                }
            }
            retryAt = nil
            return actions + openSession(now: now)
        }

        private mutating func openSession(now: UInt64) -> [Action] {
            guard !parked else { return [] }
            nextNumber += 1
            let id = SessionID(nextNumber)
            current = Session(id: id)
            // While an older session still serves, the driver need not hear of a reconnect.
            if case .connected = state, !closing.isEmpty { return [.connect(id)] }
            return report(.connecting) + [.connect(id)]
        }

        private mutating func retry(after delay: Duration, now: UInt64, authentication: Bool = false) -> [Action] {
            retryAt = now + delay.ns
            return report(authentication ? .authenticationFailed(retryIn: delay) : .disconnected(retryIn: delay))
        }

        /// The ordinary backoff, with full jitter from the machine's random source.
        private mutating func nextBackoff(lived: Duration?) -> Duration {
            let random = self.random
            return backoff.next(sessionLived: lived, random: { random(0...$0) })
        }

        private func authWait() -> Duration {
            settings.authFailureWait * random(0.75...1.25)
        }

        private mutating func resume(remaining: Int?) -> [Action] {
            guard paused, remaining.map({ $0 > 0 }) ?? true else { return [] }
            paused = false
            var actions: [Action] = [.log(.notice, "usage available again; uploads resume")]
            if let session = current, session.opened { actions.append(.wakeSender(session.id)) }
            return actions
        }

        /// A change of state, for the driver and `status`; nothing when it did not change.
        private mutating func report(_ new: ConnectionState) -> [Action] {
            guard new != state else { return [] }
            state = new
            return [.report(new)]
        }
    }
}

extension Duration {
    /// Nanoseconds, for arithmetic with `CLOCK_MONOTONIC` stamps; negative durations count as zero.
    var ns: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}
