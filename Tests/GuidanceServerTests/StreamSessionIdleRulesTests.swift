@testable import GuidanceServer
import Testing

/// When a quiet session is pinged or closed, with the time passed in: no socket, no waiting.
@Suite struct StreamSessionIdleRulesTests {
    typealias Rules = StreamSession.IdleRules
    static let t0 = ContinuousClock.now
    static func at(_ seconds: Double) -> ContinuousClock.Instant { t0 + .milliseconds(Int(seconds * 1000)) }
    /// Idle after 30 s, a hello due 5 s after the upgrade (at 0), a segment's room held 60 s at most.
    static let rules = Rules(idleTimeout: .seconds(30), startBy: at(5), segmentDeadline: .seconds(60))

    @Test func aStartedSessionHeardFromSleepsUntilHalfTheIdleTimeout() {
        #expect(
            Self.rules.next(now: Self.at(10), lastHeard: Self.at(9), started: true, roomSince: nil, pinged: nil)
                == .sleep(until: Self.at(24)))
    }

    @Test func halfWayThroughASilenceItIsPingedOnceThenClosedAtTheEnd() {
        let rules = Self.rules
        #expect(rules.next(now: Self.at(24), lastHeard: Self.at(9), started: true, roomSince: nil, pinged: nil) == .ping)
        // Pinged since it was last heard: no second ping, a sleep to the end of the silence.
        #expect(
            rules.next(now: Self.at(24), lastHeard: Self.at(9), started: true, roomSince: nil, pinged: Self.at(24))
                == .sleep(until: Self.at(39)))
        guard
            case .close(let reason, let why) = rules.next(
                now: Self.at(39), lastHeard: Self.at(9), started: true, roomSince: nil,
                pinged: Self.at(24))
        else {
            Issue.record("not closed after 30 s of silence")
            return
        }
        #expect(reason == "idle" && why == "nothing heard for 30 s")
        // An answer to the ping moves everything on: a ping before it does not count.
        #expect(
            rules.next(now: Self.at(39), lastHeard: Self.at(25), started: true, roomSince: nil, pinged: Self.at(24))
                == .sleep(until: Self.at(40)))
    }

    @Test func noHelloWithinTheHandshakeTimeoutIsClosedHeardFromOrNot() {
        let rules = Self.rules
        #expect(
            rules.next(now: Self.at(1), lastHeard: Self.at(1), started: false, roomSince: nil, pinged: nil) == .sleep(until: Self.at(5)))
        guard
            case .close(let reason, _) = rules.next(
                now: Self.at(5), lastHeard: Self.at(4.9), started: false, roomSince: nil,
                pinged: nil)
        else {
            Issue.record("a session that never said hello was not closed")
            return
        }
        #expect(reason == "no hello")
        // Started: the handshake timeout no longer applies.
        #expect(
            rules.next(now: Self.at(5), lastHeard: Self.at(4.9), started: true, roomSince: nil, pinged: nil)
                == .sleep(until: Self.at(19.9)))
    }

    @Test func roomHeldForASegmentThatDoesNotComeIsClosedThoughBytesTrickle() {
        let rules = Self.rules
        // Bytes keep coming (heard at 69.5), yet the room taken at 10 runs out at 70.
        #expect(
            rules.next(now: Self.at(69), lastHeard: Self.at(68.5), started: true, roomSince: Self.at(10), pinged: nil)
                == .sleep(until: Self.at(70)))
        guard
            case .close(let reason, let why) = rules.next(
                now: Self.at(70), lastHeard: Self.at(69.5), started: true,
                roomSince: Self.at(10), pinged: nil)
        else {
            Issue.record("a trickled segment kept its room")
            return
        }
        #expect(reason == "segment too slow" && why == "its segment did not arrive within 60 s of having room")
    }
}
