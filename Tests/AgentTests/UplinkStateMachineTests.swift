import Agent
import GuidanceProtocol
import HAL
import Logging
import Testing

/// The uplink's rules as a table of scenarios: events in, actions out; no sockets, no waiting.
@Suite struct UplinkStateMachineTests {
    typealias Machine = Uplink.StateMachine
    static let second: UInt64 = 1_000_000_000
    static let t0: UInt64 = 1_000 * second

    static func machine(queue: Int = 3, random: @escaping @Sendable (ClosedRange<Double>) -> Double = { $0.upperBound }) -> Machine {
        Machine(
            settings: .init(
                liveness: .seconds(10), ping: .seconds(5), drain: .milliseconds(1500), guidanceMaxAge: .seconds(10),
                queueSegments: queue, queueMaxAgeMs: 15_000), random: random)
    }

    /// A machine with session #1 open and welcomed at `t0`.
    static func connected(queue: Int = 3) -> Machine {
        var m = machine(queue: queue)
        #expect(m.start(now: t0) == [.connect(SessionID(1))])
        #expect(m.opened(SessionID(1), now: t0) == [])
        _ = m.received(.welcome(session: "s1", remainingSeconds: nil), on: SessionID(1), now: t0)
        #expect(m.state == .connected(session: "s1"))
        return m
    }

    static func seg(_ seq: Int, at time: UInt64 = t0) -> Segment { testSegment(seq: seq, capturedAt: time) }

    /// Sends everything the machine hands `id`, returning the sequence numbers in order.
    static func drainSends(_ m: inout Machine, _ id: SessionID, now: UInt64) -> [Int] {
        var sent: [Int] = []
        while let next = m.nextToSend(session: id, now: now).segment {
            m.sent(session: id)
            sent.append(next.metadata.seq)
        }
        return sent
    }

    @Test func segmentsGoOutInOrderAndLeaveCustodyOnlyWhenAcknowledged() {
        var m = Self.connected()
        #expect(m.segment(Self.seg(0), now: Self.t0) == [.wakeSender(SessionID(1))])
        _ = m.segment(Self.seg(1), now: Self.t0)
        #expect(Self.drainSends(&m, SessionID(1), now: Self.t0) == [0, 1])
        #expect(m.custody.inFlight.map(\.metadata.seq) == [0, 1])
        _ = m.received(.ack(seq: 0), on: SessionID(1), now: Self.t0)
        #expect(m.custody.inFlight.map(\.metadata.seq) == [1])
        #expect(m.stats.sent == 2 && m.stats.acked == 1)
    }

    static func incident(_ id: String, final: Bool = false) -> ClientMessage.Incident {
        .init(
            id: id, at: "2026-11-26T08:02:30.822Z", from: "2026-11-26T08:02:20.822Z", to: "2026-11-26T08:02:40.822Z",
            peakG: 2, seqs: [1, 2], final: final)
    }

    /// An incident is told once on each session while it is recent: at once on the session open
    /// now, again (newest state) on every later one within the memory, never after.
    @Test func anIncidentIsToldOnEverySessionWhileItIsRecent() {
        var m = Self.connected()
        #expect(m.incident(Self.incident("a"), now: Self.t0) == [.wakeSender(SessionID(1))])
        #expect(m.incidentsToSend(session: SessionID(1), now: Self.t0) == [Self.incident("a")])
        #expect(m.incidentsToSend(session: SessionID(1), now: Self.t0).isEmpty, "once per session")
        // Its final state replaces it, and is told again on the same session.
        _ = m.incident(Self.incident("a", final: true), now: Self.t0 + Self.second)
        _ = m.incident(Self.incident("b"), now: Self.t0 + 2 * Self.second)
        #expect(
            m.incidentsToSend(session: SessionID(1), now: Self.t0 + 2 * Self.second) == [
                Self.incident("a", final: true), Self.incident("b")
            ])
        #expect(m.incidentsToSend(session: SessionID(2), now: Self.t0).isEmpty, "not a session of this machine")

        // The link dies: the next session tells both again.
        _ = m.networkChanged("default route moved", now: Self.t0 + 3 * Self.second)
        _ = m.opened(SessionID(2), now: Self.t0 + 3 * Self.second)
        #expect(m.incidentsToSend(session: SessionID(2), now: Self.t0 + 3 * Self.second).map(\.id) == ["a", "b"])

        // Ten minutes on, a new session hears of neither.
        let later = Self.t0 + 3 * Self.second + 601 * Self.second
        _ = m.networkChanged("default route moved again", now: later)
        _ = m.opened(SessionID(3), now: later)
        #expect(m.incidentsToSend(session: SessionID(3), now: later).isEmpty)
    }

    @Test func atMostSixteenIncidentsAreHeldAndNoneWithoutASession() {
        var m = Self.machine()
        for i in 0..<20 { #expect(m.incident(Self.incident("i\(i)"), now: Self.t0 + UInt64(i)).isEmpty, "no session open") }
        _ = m.start(now: Self.t0 + 100)
        _ = m.opened(SessionID(1), now: Self.t0 + 100)
        let told = m.incidentsToSend(session: SessionID(1), now: Self.t0 + 100).map(\.id)
        #expect(told == (4..<20).map { "i\($0)" }, "the newest \(Machine.maxIncidents), oldest first")
    }

    @Test func aNetworkChangeOpensTheNewSessionAtOnceAndResendsWhatTheOldOneNeverAcknowledged() {
        var m = Self.connected()
        for seq in 0..<3 { _ = m.segment(Self.seg(seq), now: Self.t0) }
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        _ = m.received(.ack(seq: 0), on: SessionID(1), now: Self.t0)

        let actions = m.networkChanged("default route moved from va1 to va2", now: Self.t0 + Self.second)
        // Make before break: the old session gets a 1001 with 1 s for its handshake, the new one
        // opens now, and the driver hears of no reconnect while the old one still serves.
        #expect(actions.dropFirst() == [.close(SessionID(1), code: .goingAway, grace: .seconds(1)), .connect(SessionID(2))])
        #expect(m.state == .connected(session: "s1"))
        #expect(m.custody.unsent.map(\.metadata.seq) == [1, 2])
        // Nothing more goes to the old session.
        #expect(m.nextToSend(session: SessionID(1), now: Self.t0 + Self.second).segment == nil)

        #expect(m.opened(SessionID(2), now: Self.t0 + Self.second) == [.wakeSender(SessionID(2))])
        _ = m.segment(Self.seg(3), now: Self.t0 + Self.second)
        #expect(Self.drainSends(&m, SessionID(2), now: Self.t0 + Self.second) == [1, 2, 3])
        #expect(m.stats.resent == 2)
        // The old session's ack, late, still counts; the new session's duplicate is survived.
        _ = m.received(.ack(seq: 1), on: SessionID(1), now: Self.t0 + Self.second)
        #expect(m.custody.inFlight.map(\.metadata.seq) == [2, 3])
        let duplicate = m.received(.ack(seq: 1), on: SessionID(2), now: Self.t0 + Self.second)
        #expect(duplicate.contains { if case .log(.debug, _) = $0 { true } else { false } })
        #expect(m.stats.acked == 2)
        // The old session's end changes nothing for the new one.
        #expect(m.ended(SessionID(1), code: nil, now: Self.t0 + 2 * Self.second) == [])
        #expect(m.currentSession == SessionID(2))
    }

    @Test func aParkedCarClosesItsSessionOpensNoneAndReconnectsAtOnceWhenDriving() {
        var m = Self.connected()
        let park = m.park(now: Self.t0 + Self.second)
        #expect(park.contains(.close(SessionID(1), code: .goingAway, grace: m.settings.closeGrace)))
        #expect(m.state == .parked)
        #expect(m.parked)
        #expect(
            m.ended(SessionID(1), code: 1001, now: Self.t0 + 2 * Self.second).allSatisfy { if case .connect = $0 { false } else { true } })
        // Whatever the network does, and however long it is, no session opens.
        let changed = m.networkChanged("default route moved", now: Self.t0 + 3 * Self.second)
        #expect(!changed.contains { if case .connect = $0 { true } else { false } })
        #expect(m.tick(now: Self.t0 + 3600 * Self.second).isEmpty)
        #expect(m.nextDeadline == nil)
        #expect(m.currentSession == nil)
        // Held segments wait for driving; parking twice changes nothing.
        _ = m.segment(Self.seg(7), now: Self.t0 + 3600 * Self.second)
        #expect(m.park(now: Self.t0 + 3600 * Self.second).isEmpty)
        let drive = m.drive(now: Self.t0 + 3601 * Self.second)
        #expect(drive.contains(.connect(SessionID(2))))
        #expect(!m.parked)
        #expect(m.drive(now: Self.t0 + 3601 * Self.second).isEmpty)
    }

    /// Close 1012: the server is restarting, and every car it had heard it at the same moment. The
    /// reconnect waits a random part of `restartSpread` (here half of 10 s), not the backoff's
    /// 250 ms; the backoff after it starts again from its base.
    @Test func aServerRestartIsWaitedOutForARandomPartOfTheSpread() {
        var m = Self.machine(random: { $0.lowerBound + ($0.upperBound - $0.lowerBound) / 2 })
        _ = m.start(now: Self.t0)
        // Three failed attempts first: without a reset the next backoff would be up to 2 s.
        for n in 1...3 {
            _ = m.connectFailed(SessionID(n), .unreachable("refused"), now: Self.t0)
            #expect(m.tick(now: Self.t0 + 10 * Self.second).contains(.connect(SessionID(n + 1))))
        }
        let opened = Self.t0 + 10 * Self.second
        _ = m.opened(SessionID(4), now: opened)
        _ = m.received(.welcome(session: "s4", remainingSeconds: nil), on: SessionID(4), now: opened)

        let closed = opened + Self.second
        let restart = m.ended(SessionID(4), code: CloseCode.serviceRestart.rawValue, now: closed)
        #expect(restart.last == .report(.disconnected(retryIn: .seconds(5))))
        #expect(restart.contains { if case .log(.notice, let text) = $0 { text.contains("1012") } else { false } })
        #expect(!m.tick(now: closed + 4 * Self.second).contains { if case .connect = $0 { true } else { false } })
        #expect(m.tick(now: closed + 5 * Self.second).contains(.connect(SessionID(5))))
        // The server is not up yet: the backoff from its base, half of 250 ms.
        let failed = m.connectFailed(SessionID(5), .unreachable("refused"), now: closed + 5 * Self.second)
        #expect(failed.last == .report(.disconnected(retryIn: .milliseconds(125))))
        // A drop without a close code is the ordinary backoff, as before.
        var other = Self.connected()
        #expect(
            other.ended(SessionID(1), code: nil, now: Self.t0 + Self.second).last == .report(.disconnected(retryIn: .milliseconds(250))))
    }

    @Test func aParkedCarStillShutsDown() {
        var m = Self.connected()
        _ = m.park(now: Self.t0)
        _ = m.ended(SessionID(1), code: 1001, now: Self.t0)
        let stop = m.shutdown(now: Self.t0 + Self.second)
        #expect(stop.contains(.finish))
        #expect(m.isFinished)
    }

    @Test func aChangeWhileConnectingCancelsTheAttemptOnTheOldPath() {
        var m = Self.machine()
        _ = m.start(now: Self.t0)
        #expect(m.networkChanged("x", now: Self.t0).dropFirst() == [.cancel(SessionID(1)), .connect(SessionID(2))])
        // The cancelled attempt's failure, arriving late, is ignored.
        #expect(m.connectFailed(SessionID(1), .timedOut, now: Self.t0 + Self.second) == [])
    }

    @Test func aSessionThatHearsNothingWithASegmentOutstandingIsGivenUp() {
        var m = Self.connected()
        _ = m.segment(Self.seg(0), now: Self.t0)
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        #expect(m.tick(now: Self.t0 + 9 * Self.second) == [])
        let actions = m.tick(now: Self.t0 + 10 * Self.second)
        #expect(actions.dropFirst() == [.close(SessionID(1), code: .goingAway, grace: .seconds(1)), .connect(SessionID(2))])
        #expect(m.custody.unsent.map(\.metadata.seq) == [0])
    }

    @Test func acksAndPongsKeepASessionAlive() {
        var m = Self.connected()
        _ = m.segment(Self.seg(0), now: Self.t0)
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        m.heard(SessionID(1), now: Self.t0 + 8 * Self.second)
        #expect(m.tick(now: Self.t0 + 12 * Self.second) == [])
        _ = m.received(.ack(seq: 0), on: SessionID(1), now: Self.t0 + 12 * Self.second)
        // Nothing outstanding: only two ping periods without a pong end it.
        #expect(m.tick(now: Self.t0 + 21 * Self.second) == [])
        #expect(m.tick(now: Self.t0 + 22 * Self.second).contains(.connect(SessionID(2))))
    }

    @Test func aPeerThatTakesTheUpgradeButNeverWelcomesIsGivenUp() {
        var m = Self.machine()
        _ = m.start(now: Self.t0)
        _ = m.opened(SessionID(1), now: Self.t0)
        #expect(m.tick(now: Self.t0 + 9 * Self.second) == [])
        #expect(m.tick(now: Self.t0 + 10 * Self.second).contains(.connect(SessionID(2))))
    }

    @Test func refusedUpgradesAreToldApartByTheirStatus() {
        // 401: authentication failure, a long wait with jitter.
        var m = Self.machine(random: { $0.lowerBound })
        _ = m.start(now: Self.t0)
        let auth = m.connectFailed(SessionID(1), .refused(status: 401, retryAfter: nil), now: Self.t0)
        #expect(auth.last == .report(.authenticationFailed(retryIn: .seconds(45))))
        #expect(m.tick(now: Self.t0 + 44 * Self.second) == [])
        #expect(m.tick(now: Self.t0 + 45 * Self.second) == [.report(.connecting), .connect(SessionID(2))])

        // 503 with Retry-After: the server's wait, not the short backoff.
        let retryAfter = m.connectFailed(SessionID(2), .refused(status: 503, retryAfter: .seconds(7)), now: Self.t0 + 45 * Self.second)
        #expect(retryAfter.last == .report(.disconnected(retryIn: .seconds(7))))
        _ = m.tick(now: Self.t0 + 52 * Self.second)
        // 429 without one: backoff with full jitter (here the jitter's floor).
        #expect(
            m.connectFailed(SessionID(3), .refused(status: 429, retryAfter: nil), now: Self.t0 + 52 * Self.second).last
                == .report(.disconnected(retryIn: .zero)))
        // An absurd Retry-After is capped.
        _ = m.tick(now: Self.t0 + 52 * Self.second)
        #expect(
            m.connectFailed(SessionID(4), .refused(status: 503, retryAfter: .seconds(1_000_000)), now: Self.t0 + 52 * Self.second).last
                == .report(.disconnected(retryIn: .seconds(600))))
    }

    @Test func aRetryAfterIsWaitedOutWithJitterOnTop() {
        // The jitter's ceiling: half as long again; never less than the server asked.
        var late = Self.machine(random: { $0.upperBound })
        _ = late.start(now: Self.t0)
        #expect(
            late.connectFailed(SessionID(1), .refused(status: 503, retryAfter: .seconds(8)), now: Self.t0).last
                == .report(.disconnected(retryIn: .seconds(12))))
        #expect(late.tick(now: Self.t0 + 11 * Self.second) == [])
        #expect(late.tick(now: Self.t0 + 12 * Self.second).contains(.connect(SessionID(2))))
        // Two cars refused in the same second come back apart: the wait is drawn, not fixed.
        var drawn: Set<Duration> = []
        for _ in 0..<20 {
            var car = Self.machine(random: { Double.random(in: $0) })
            _ = car.start(now: Self.t0)
            if case .report(.disconnected(let wait)) = car.connectFailed(
                SessionID(1), .refused(status: 429, retryAfter: .seconds(8)), now: Self.t0
            ).last {
                #expect(wait >= .seconds(8) && wait <= .seconds(12))
                drawn.insert(wait)
            }
        }
        #expect(drawn.count > 1)
    }

    @Test func withoutATokenTheFileIsReadAgainEveryThirtySecondsAndTheSameProblemLoggedOnce() {
        var m = Self.machine()
        _ = m.start(now: Self.t0)
        func logs(_ actions: [Machine.Action]) -> Int { actions.filter { if case .log(.error, _) = $0 { true } else { false } }.count }
        let missing = "uplink.tokenFile /etc/dashcam-agent/token: No such file or directory"
        let first = m.connectFailed(SessionID(1), .noToken(missing), now: Self.t0)
        #expect(logs(first) == 1)
        #expect(first.last == .report(.noToken(problem: missing, retryIn: .seconds(30))))
        #expect(m.tick(now: Self.t0 + 29 * Self.second) == [])
        #expect(m.tick(now: Self.t0 + 30 * Self.second) == [.report(.connecting), .connect(SessionID(2))])
        #expect(logs(m.connectFailed(SessionID(2), .noToken(missing), now: Self.t0 + 30 * Self.second)) == 0)
        // A different problem (the file appeared, but empty) is logged.
        _ = m.tick(now: Self.t0 + 60 * Self.second)
        #expect(
            logs(
                m.connectFailed(
                    SessionID(3), .noToken("uplink.tokenFile /etc/dashcam-agent/token is empty"), now: Self.t0 + 60 * Self.second)) == 1)
        // Nothing reached the server: these are not reconnects.
        #expect(m.stats.reconnects == 0)
        _ = m.tick(now: Self.t0 + 90 * Self.second)
        #expect(m.opened(SessionID(4), now: Self.t0 + 90 * Self.second) == [])
    }

    @Test func notFoundIsAConfigErrorLoggedAtMostOnceAMinute() {
        var m = Self.machine()
        _ = m.start(now: Self.t0)
        func logs(_ actions: [Machine.Action]) -> Int { actions.filter { if case .log(.error, _) = $0 { true } else { false } }.count }
        #expect(logs(m.connectFailed(SessionID(1), .refused(status: 404, retryAfter: nil), now: Self.t0)) == 1)
        _ = m.tick(now: Self.t0 + 31 * Self.second)
        #expect(logs(m.connectFailed(SessionID(2), .refused(status: 404, retryAfter: nil), now: Self.t0 + 31 * Self.second)) == 0)
        _ = m.tick(now: Self.t0 + 62 * Self.second)
        #expect(logs(m.connectFailed(SessionID(3), .refused(status: 404, retryAfter: nil), now: Self.t0 + 62 * Self.second)) == 1)
    }

    @Test func anUpgradeThatNeverComesIsRetriedAfterTheBackoff() {
        var m = Self.machine(random: { $0.upperBound })
        _ = m.start(now: Self.t0)
        #expect(
            m.connectFailed(SessionID(1), .timedOut, now: Self.t0 + 5 * Self.second).last
                == .report(.disconnected(retryIn: .milliseconds(250))))
        #expect(m.tick(now: Self.t0 + 5 * Self.second + 250_000_000).contains(.connect(SessionID(2))))
    }

    @Test func quotaExhaustedPausesUploadsUntilUsageReturns() {
        var m = Self.connected()
        _ = m.ended(SessionID(1), code: CloseCode.quotaExhausted.rawValue, now: Self.t0 + Self.second)
        #expect(m.paused)
        _ = m.tick(now: Self.t0 + 40 * Self.second)
        _ = m.opened(SessionID(2), now: Self.t0 + 40 * Self.second)
        #expect(m.segment(Self.seg(0, at: Self.t0 + 40 * Self.second), now: Self.t0 + 40 * Self.second) == [])
        #expect(m.nextToSend(session: SessionID(2), now: Self.t0 + 40 * Self.second).segment == nil)
        let resumed = m.received(.welcome(session: "s2", remainingSeconds: 120), on: SessionID(2), now: Self.t0 + 40 * Self.second)
        #expect(resumed.contains(.wakeSender(SessionID(2))))
        #expect(!m.paused)
    }

    @Test func heldSegmentsCountAgainstOneBoundAndTheOldestGoesFirst() {
        var m = Self.connected(queue: 3)
        _ = m.segment(Self.seg(0), now: Self.t0)
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        for seq in 1...3 { _ = m.segment(Self.seg(seq), now: Self.t0) }
        #expect(m.custody.inFlight.isEmpty)
        #expect(m.custody.unsent.map(\.metadata.seq) == [1, 2, 3])
        #expect(m.stats.dropped == 1)
        // Too old to be worth sending: dropped and counted instead.
        let late = Self.t0 + 16 * Self.second
        #expect(m.nextToSend(session: SessionID(1), now: late).segment == nil)
        #expect(m.stats.dropped == 4)
    }

    @Test func unknownAcksAreLoggedOncePerSessionAndSurvived() {
        var m = Self.connected()
        func warnings(_ actions: [Machine.Action]) -> Int {
            actions.filter { if case .log(.warning, _) = $0 { true } else { false } }.count
        }
        #expect(warnings(m.received(.ack(seq: 99), on: SessionID(1), now: Self.t0)) == 1)
        #expect(warnings(m.received(.ack(seq: 98), on: SessionID(1), now: Self.t0)) == 0)
        #expect(m.stats.acked == 0 && m.currentSession == SessionID(1))
    }

    @Test func guidanceOlderThanTheLimitIsNotDelivered() {
        var m = Self.connected()
        _ = m.segment(Self.seg(0), now: Self.t0)
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        let guidance = ServerMessage.Guidance(seq: 0, text: "slow down", lang: "en", clear: false, priority: .normal)
        #expect(
            m.received(.guidance(guidance), on: SessionID(1), now: Self.t0 + 11 * Self.second).allSatisfy {
                if case .deliver = $0 { false } else { true }
            })
        #expect(m.stats.staleGuidance == 1)
        #expect(m.received(.guidance(guidance), on: SessionID(1), now: Self.t0 + 2 * Self.second).contains(.deliver(.guidance(guidance))))
    }

    @Test func shutdownSendsWhatIsHeldWaitsForAckAndGuidanceThenClosesWith1001() {
        var m = Self.connected()
        _ = m.segment(Self.seg(0), now: Self.t0)
        #expect(m.shutdown(now: Self.t0) == [.wakeSender(SessionID(1))])
        #expect(Self.drainSends(&m, SessionID(1), now: Self.t0) == [0])
        #expect(m.received(.ack(seq: 0), on: SessionID(1), now: Self.t0).contains { if case .close = $0 { true } else { false } } == false)
        let guidance = ServerMessage.Guidance(seq: 0, text: "clear", lang: nil, clear: true, priority: .normal)
        #expect(
            m.received(.guidance(guidance), on: SessionID(1), now: Self.t0) == [
                .deliver(.guidance(guidance)), .close(SessionID(1), code: .goingAway, grace: .milliseconds(500))
            ])
        #expect(m.ended(SessionID(1), code: 1001, now: Self.t0) == [.report(.stopped), .finish])
        #expect(m.isFinished)
    }

    @Test func aDrainThatRunsOutClosesAnyway() {
        var m = Self.connected()
        _ = m.segment(Self.seg(0), now: Self.t0)
        _ = m.shutdown(now: Self.t0)
        _ = Self.drainSends(&m, SessionID(1), now: Self.t0)
        #expect(m.tick(now: Self.t0 + 1_400_000_000) == [])
        #expect(m.tick(now: Self.t0 + 1_500_000_000).contains(.close(SessionID(1), code: .goingAway, grace: .milliseconds(500))))
    }

    @Test func shutdownWithNothingHeldOrNoSessionEndsAtOnce() {
        var idle = Self.connected()
        #expect(idle.shutdown(now: Self.t0) == [.close(SessionID(1), code: .goingAway, grace: .milliseconds(500))])
        var waiting = Self.machine()
        _ = waiting.start(now: Self.t0)
        _ = waiting.connectFailed(SessionID(1), .unreachable("refused"), now: Self.t0)
        #expect(waiting.shutdown(now: Self.t0) == [.report(.stopped), .finish])
        // No reconnect after a shutdown.
        #expect(waiting.tick(now: Self.t0 + 60 * Self.second) == [])
    }
}
