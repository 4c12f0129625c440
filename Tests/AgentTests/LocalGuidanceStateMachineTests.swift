@testable import Agent
import RoadScene
import Testing

/// When the device guides itself and what it says: ``LocalGuidance.StateMachine`` alone, on a made-up clock.
@Suite struct LocalGuidanceStateMachineTests {
    let start = ContinuousClock.now
    let settings = LocalGuidance.StateMachine.Settings(enabled: true, offlineAfter: .seconds(15), repeatAfter: .seconds(30))

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    @Test func noSessionForTheWholeDelayTurnsItOnOnceAndOnlyThen() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        #expect(rules.deadline == at(15))
        #expect(rules.tick(now: at(14.9)).isEmpty)
        #expect(rules.sessionClosed(now: at(14.95)).isEmpty, "a failed attempt does not restart the wait")
        #expect(rules.tick(now: at(15)) == [.startLooking(.noSession)])
        #expect(rules.active == .noSession)
        // The news waits up to 2 s for a warning to go with; a first look with nothing says it.
        #expect(rules.deadline == at(17))
        #expect(rules.looked(nil, now: at(16)) == [.announce(.guidanceLocal)])
        #expect(rules.tick(now: at(40)).isEmpty)
        #expect(rules.sessionClosed(now: at(41)).isEmpty)
        #expect(rules.deadline == nil)
    }

    @Test func aSessionBeforeTheDelayKeepsItOffAndItsEndStartsTheWaitAgain() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        #expect(rules.sessionOpened(now: at(2)).isEmpty)
        #expect(rules.usage(remainingSeconds: 600, now: at(2.1)).isEmpty)
        #expect(rules.deadline == nil)
        #expect(rules.tick(now: at(100)).isEmpty)
        // The tunnel: the session ends at 100 s.
        #expect(rules.sessionClosed(now: at(100)).isEmpty)
        #expect(rules.deadline == at(115))
        #expect(rules.tick(now: at(114)).isEmpty)
        #expect(rules.tick(now: at(115.2)) == [.startLooking(.noSession)])
        // No frame comes (the camera is gone too): the news is said alone once its hold is over.
        #expect(rules.tick(now: at(117.1)).isEmpty)
        #expect(rules.tick(now: at(117.2)) == [.announce(.guidanceLocal)])
        // Out of the tunnel: a session and usage; the server guides again, said once.
        #expect(rules.sessionOpened(now: at(130)) == [.stopLooking, .announce(.guidanceFromServer)])
        #expect(rules.usage(remainingSeconds: 500, now: at(130.1)).isEmpty)
        #expect(rules.active == nil)
    }

    @Test func exhaustedUsageTurnsItOnAtOnceAndOnlyUsageTurnsItOff() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        _ = rules.sessionOpened(now: at(1))
        #expect(rules.usage(remainingSeconds: 0, now: at(1.1)) == [.startLooking(.usageExhausted)])
        // The first look finds someone: the news and the warning in one utterance.
        #expect(rules.looked(.pedestrian, now: at(2)) == [.warn(.pedestrian, after: [.guidanceLocal])])
        // A new session while the usage is still exhausted changes nothing.
        #expect(rules.sessionClosed(now: at(20)).isEmpty)
        #expect(rules.sessionOpened(now: at(21)).isEmpty)
        #expect(rules.active == .usageExhausted)
        // The welcome says usage was bought: the server guides again.
        #expect(rules.usage(remainingSeconds: 3600, now: at(22)) == [.stopLooking, .announce(.guidanceFromServer)])
        // Unlimited usage counts as available.
        #expect(rules.usage(remainingSeconds: nil, now: at(23)).isEmpty)
    }

    @Test func exhaustedThenNoSessionKeepsItOnForTheOtherReason() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        _ = rules.sessionOpened(now: at(1))
        _ = rules.usage(remainingSeconds: -5, now: at(2))
        _ = rules.sessionClosed(now: at(3))
        // Usage is back, but there has been no session for 15 s: still local, nothing said.
        #expect(rules.usage(remainingSeconds: 60, now: at(20)).isEmpty)
        #expect(rules.active == .noSession)
    }

    @Test func aServerWhoseModelIsDownLeavesItToTheDeviceUntilGuidanceComes() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        _ = rules.sessionOpened(now: at(1))
        _ = rules.usage(remainingSeconds: 600, now: at(1))
        #expect(rules.guidanceUnavailable(true, now: at(10)) == [.startLooking(.guidanceUnavailable)])
        #expect(rules.tick(now: at(12)) == [.announce(.guidanceLocal)])
        #expect(rules.guidanceUnavailable(true, now: at(15)).isEmpty)
        #expect(rules.guidanceUnavailable(false, now: at(20)) == [.stopLooking, .announce(.guidanceFromServer)])
    }

    @Test func aWarningIsNotRepeatedWithinTheRepeatTime() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        #expect(rules.looked(.tooDark, now: at(1)).isEmpty, "nothing is said while the server may still guide")
        _ = rules.tick(now: at(15))
        #expect(rules.looked(.tooDark, now: at(16)) == [.warn(.tooDark, after: [.guidanceLocal])])
        #expect(rules.looked(.tooDark, now: at(17)).isEmpty)
        #expect(rules.looked(nil, now: at(18)).isEmpty)
        #expect(rules.looked(.tooDark, now: at(45.9)).isEmpty, "gone and back within 30 s")
        #expect(rules.looked(.pedestrianClose, now: at(46)) == [.warn(.pedestrianClose)], "another finding is its own warning")
        #expect(rules.looked(.tooDark, now: at(46)) == [.warn(.tooDark)])
        #expect(rules.looked(.pedestrianClose, now: at(60)).isEmpty)
    }

    @Test func theSwitchTurnsItOffAtOnceWithoutSayingTheServerIsBack() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        _ = rules.tick(now: at(16))
        var off = settings
        off.enabled = false
        #expect(rules.reconfigure(off, now: at(17)) == [.stopLooking])
        #expect(rules.looked(.tooDark, now: at(18)).isEmpty)
        #expect(rules.deadline == nil)
        #expect(rules.tick(now: at(100)).isEmpty)
        // Turned on again after a long time without a session: on at once.
        #expect(rules.reconfigure(settings, now: at(101)) == [.startLooking(.noSession)])
    }

    @Test func localGuidanceThatEndsBeforeItsNewsWasSaidEndsWithoutAWord() {
        var rules = LocalGuidance.StateMachine(settings: settings, now: at(0))
        #expect(rules.tick(now: at(15)) == [.startLooking(.noSession)])
        // The session is back within the hold, before any look: nothing was said, nothing is.
        #expect(rules.sessionOpened(now: at(16)) == [.stopLooking])
        #expect(rules.deadline == nil)
        #expect(rules.tick(now: at(20)).isEmpty)
    }

    @Test func aDisabledDeviceNeverGuidesItself() {
        var rules = LocalGuidance.StateMachine(
            settings: .init(enabled: false, offlineAfter: .seconds(1), repeatAfter: .seconds(1)), now: at(0))
        #expect(rules.tick(now: at(60)).isEmpty)
        #expect(rules.usage(remainingSeconds: 0, now: at(61)).isEmpty)
        #expect(rules.active == nil)
    }
}
