import Agent
import ConfigSupport
import Foundation
import GuidanceProtocol
import GuidanceServer
import HAL
import Hummingbird
import Logging
import Synchronization
import TestSupport
import Testing

@Suite struct BackoffTests {
    @Test func delaysDoubleUpToTheCapWithFullJitter() {
        var backoff = Backoff()
        let ceilings = (0..<10).map { _ in backoff.next(sessionLived: nil, random: { $0 }) }
        #expect(ceilings.prefix(4) == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2)])
        #expect(ceilings.last == .seconds(30))
        var jittered = Backoff()
        #expect(jittered.next(sessionLived: nil, random: { $0 / 2 }) == .milliseconds(125))
    }

    @Test func aSessionThatLivedThirtySecondsResetsTheBackoff() {
        var backoff = Backoff()
        for _ in 0..<6 { _ = backoff.next(sessionLived: .seconds(3), random: { $0 }) }
        #expect(backoff.next(sessionLived: .seconds(31), random: { $0 }) == .milliseconds(250))
    }
}
