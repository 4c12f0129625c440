import Agent
import Synchronization
import Testing

/// Which status phrases the driver hears, and how often: ``StatusAnnouncer/StateMachine`` with
/// the time passed in, so "nothing more is said" is checked at a moment the test chooses.
@Suite struct StatusAnnouncerTests {
    typealias Machine = StatusAnnouncer.StateMachine
    let start = ContinuousClock.now
    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// Every utterance due up to `end`, ticking at each deadline as the announcer's timer would.
    func utterances(_ machine: inout Machine, until end: ContinuousClock.Instant) -> [[StatusPhrase]] {
        var said: [[StatusPhrase]] = []
        while let deadline = machine.deadline, deadline <= end {
            let utterance = machine.tick(now: deadline)
            if !utterance.isEmpty { said.append(utterance) }
        }
        return said
    }

    @Test func startConnectAndUsageAreSpokenTogetherOnce() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        machine.uplink(.connecting, now: at(0))
        machine.uplink(.connected(session: "a"), now: at(100))
        machine.usage(remainingSeconds: 43 * 60, fromWelcome: true, now: at(200))
        #expect(machine.deadline == at(350), "gathered from the first phrase on")
        #expect(machine.tick(now: at(349)).isEmpty)
        #expect(machine.tick(now: at(350)) == [.connected, .usageRemaining(minutes: 43)])
        // A reconnect after a network change: not spoken again.
        machine.uplink(.disconnected(retryIn: .zero), now: at(1000))
        machine.uplink(.connected(session: "b"), now: at(1100))
        machine.usage(remainingSeconds: 43 * 60, fromWelcome: true, now: at(1200))
        #expect(machine.deadline == nil)
        #expect(utterances(&machine, until: at(60_000)).isEmpty)
    }

    @Test func aConnectionLostForLongerThanTheThresholdIsSpokenOnceThenConnectedAgain() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        machine.uplink(.connected(session: "a"), now: at(0))
        #expect(utterances(&machine, until: at(1000)) == [[.connected]])
        machine.uplink(.disconnected(retryIn: .milliseconds(50)), now: at(1000))
        machine.uplink(.connecting, now: at(1050))
        machine.uplink(.disconnected(retryIn: .milliseconds(100)), now: at(1100))
        #expect(machine.deadline == at(11_000), "lost counts from the first moment without a session")
        #expect(utterances(&machine, until: at(11_249)).isEmpty)
        #expect(utterances(&machine, until: at(11_250)) == [[.connectionLost]])
        // Still down: nothing more, however long.
        machine.uplink(.connecting, now: at(12_000))
        machine.uplink(.disconnected(retryIn: .seconds(1)), now: at(13_000))
        #expect(utterances(&machine, until: at(600_000)).isEmpty)
        machine.uplink(.connected(session: "b"), now: at(600_000))
        #expect(utterances(&machine, until: at(601_000)) == [[.connected]])
    }

    @Test func aBlipShorterThanTheThresholdSaysNothing() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        machine.uplink(.connected(session: "a"), now: at(0))
        #expect(utterances(&machine, until: at(1000)) == [[.connected]])
        machine.uplink(.disconnected(retryIn: .milliseconds(50)), now: at(1000))
        machine.uplink(.connected(session: "b"), now: at(10_999))
        #expect(utterances(&machine, until: at(600_000)).isEmpty)
    }

    @Test func authenticationFailureIsSpokenOncePerRunOfRefusalsAndNotAsConnectionLost() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        for attempt in 0..<3 {
            machine.uplink(.connecting, now: at(attempt * 60_000))
            machine.uplink(.authenticationFailed(retryIn: .seconds(60)), now: at(attempt * 60_000 + 100))
        }
        #expect(utterances(&machine, until: at(600_000)) == [[.authenticationFailed]])
    }

    @Test func aMissingTokenIsSpokenOnceNotAsConnectionLostAndAgainOnlyAfterASession() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        for attempt in 0..<3 {
            machine.uplink(.connecting, now: at(attempt * 30_000))
            machine.uplink(
                .noToken(problem: "uplink.tokenFile /etc/dashcam-agent/token: No such file or directory", retryIn: .seconds(30)),
                now: at(attempt * 30_000 + 10))
        }
        #expect(utterances(&machine, until: at(600_000)) == [[.noToken]])
        machine.uplink(.connected(session: "a"), now: at(600_000))
        var said = utterances(&machine, until: at(601_000))
        machine.uplink(.noToken(problem: "uplink.tokenFile /etc/dashcam-agent/token is empty", retryIn: .seconds(30)), now: at(601_000))
        said += utterances(&machine, until: at(1_200_000))
        #expect(said == [[.connected], [.noToken]])
    }

    @Test func usageLowAndExhaustedAreSpokenOnceEachUntilUsageComesBack() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        machine.usage(remainingSeconds: nil, fromWelcome: true, now: at(0))
        var said: [StatusPhrase] = []
        for (index, seconds) in [900, 599, 480, 300, 0, 0, 3600, 120].enumerated() {
            machine.usage(remainingSeconds: seconds, fromWelcome: false, now: at(index * 5000))
            said += utterances(&machine, until: at(index * 5000 + 4999)).flatMap { $0 }
        }
        #expect(said == [.usageUnlimited, .usageLow(minutes: 9), .usageExhausted, .usageLow(minutes: 2)])
    }

    @Test func cameraLostAndBackAreSpokenOncePerChange() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        var said: [[StatusPhrase]] = []
        for (index, event) in [CameraEvent.lost(reason: "unplugged"), .lost(reason: "still unplugged"), .back, .back].enumerated() {
            machine.camera(event, now: at(index * 1000))
            said += utterances(&machine, until: at(index * 1000 + 999))
        }
        #expect(said == [[.cameraLost], [.cameraBack]])
    }

    @Test func aPhraseSaidAtOnceTakesTheGatheredOnesWithItFirst() {
        var machine = Machine(lostAfter: .seconds(10), gather: .milliseconds(250))
        machine.started(now: at(0))
        #expect(machine.say(.guidanceLocal) == [.ready, .guidanceLocal])
        #expect(machine.deadline == nil)
        #expect(utterances(&machine, until: at(600_000)).isEmpty)
    }

    /// The actor on the real clock: its one timer speaks what the machine gathered.
    @Test func theAnnouncerSpeaksTheGatheredPhrasesWhenTheirWindowEnds() async throws {
        let heard = Heard()
        let announcer = StatusAnnouncer(lostAfter: .milliseconds(100), gather: .milliseconds(30)) { phrases in
            heard.phrases.withLock { $0.append(phrases) }
        }
        await announcer.started()
        await announcer.uplink(.connecting)
        try await heard.wait(for: 2)
        // One utterance or two: a late timer finds both due at once.
        #expect(heard.all == [.ready, .connectionLost])
    }
}
