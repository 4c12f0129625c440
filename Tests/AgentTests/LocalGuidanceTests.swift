@testable import Agent
import Foundation
import GuidanceProtocol
import HAL
import RoadScene
import TestSupport
import Testing

/// Local guidance between the rules and the driver: what the router does with a finding, and
/// what the driver hears as sessions and usage come and go (real eSpeak-ng to WAV files, a
/// recording motor line; the rules themselves are in ``LocalGuidanceStateMachineTests``).
@Suite struct LocalGuidanceTests {
    @Test func aClosePedestrianIsUrgentWithTheAlertAndTheOtherFindingsAreSpokenPlainly() async throws {
        let loop = try GuidanceRouterTests.Loop(deviceLocale: "ko-KR")
        defer { loop.close() }
        loop.router.local(.tooDark)
        await loop.router.voice.waitUntilIdle()
        #expect(loop.line.pulses == 0)
        loop.router.local(.pedestrianClose)
        await loop.router.voice.waitUntilIdle()
        try await loop.waitForPulses(3)
        #expect(loop.line.pulses == 3, "the alert pattern, as with urgent server guidance")
        #expect(loop.files == ["000001-ko.wav", "000002-ko.wav"])
        #expect(loop.router.board.current.localGuidance == nil, "no local guidance state to count into")
    }

    @Test func theDriverHearsOnceThatTheDeviceWarnsAndOnceThatTheServerIsBack() async throws {
        let loop = try GuidanceRouterTests.Loop(deviceLocale: "en-US")
        defer { loop.close() }
        let watch = try RoadWatch(fps: 1, maxCpuPercent: 50)
        let offline = LocalGuidance(
            settings: .init(enabled: true, offlineAfter: .milliseconds(50), repeatAfter: .seconds(30)), watch: watch,
            router: loop.router, announcer: loop.router.announcer, board: loop.router.board, logger: GuidanceRouterTests.logger)
        #expect(loop.router.board.current.localGuidance?.state == "standby")
        await offline.uplink(.connecting)
        await offline.uplink(.disconnected(retryIn: .seconds(1)))
        // Ticked as the service's timer would, until the rules' deadline has passed.
        #expect(
            await eventually {
                await offline.tick(); return watch.isLooking
            })
        #expect(loop.router.board.current.localGuidance?.state == "on")
        #expect(loop.router.board.current.localGuidance?.reason == "no session")
        // No frame came to warn about: the news is said alone once its hold is over.
        #expect(
            await eventually {
                await offline.tick(); return !loop.spoken.all.isEmpty
            })
        #expect(loop.spoken.all == [.guidanceLocal])

        await offline.uplink(.connected(session: "s1"))
        await offline.received(.welcome(session: "s1", remainingSeconds: 600))
        try await loop.spoken.wait(for: 2)
        #expect(loop.spoken.all == [.guidanceLocal, .guidanceFromServer])
        #expect(!watch.isLooking)
        #expect(loop.router.board.current.localGuidance?.state == "standby")

        // Usage runs out in the session: local again at once, and back when usage is bought.
        await offline.received(.error(code: .quotaExhausted, message: "no usage left", seq: nil))
        #expect(watch.isLooking && loop.router.board.current.localGuidance?.reason == "usage exhausted")
        await offline.received(.welcome(session: "s2", remainingSeconds: 3600))
        #expect(!watch.isLooking)
        await watch.shutdown()
    }
}
