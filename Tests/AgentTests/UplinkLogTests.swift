import Agent
import Foundation
import GuidanceProtocol
import HAL
import Logging
import TestSupport
import Testing

/// What the uplink's log says when things go wrong fast: drops counted exactly, and a peer that
/// sends garbage cannot fill the journal.
@Suite struct UplinkLogTests {
    typealias Machine = Uplink.StateMachine
    static let second: UInt64 = 1_000_000_000
    static let t0: UInt64 = 1_000 * second

    /// The numbers of a drop line: (since the last line, in all).
    static func dropCounts(_ actions: [Machine.Action]) -> [(since: Int, total: Int)] {
        actions.compactMap { action in
            guard case .log(_, let text) = action,
                let match = text.firstMatch(of: /dropped (\d+) segment\(s\) not delivered in time, kept on disk \((\d+) in all\)/)
            else { return nil }
            return (Int(match.1)!, Int(match.2)!)
        }
    }

    @Test func eachDropLineCountsTheDropsSinceTheLineBefore() {
        var m = Machine(
            settings: .init(
                liveness: .seconds(10), ping: .seconds(5), drain: .milliseconds(1500), guidanceMaxAge: .seconds(10),
                queueSegments: 1, queueMaxAgeMs: 60_000))
        _ = m.start(now: Self.t0)
        var lines: [(since: Int, total: Int)] = []
        // Nothing is sent: with room for one, every new segment drops the one held. One a second
        // for 25 s: the log may speak at 0 s, 10 s and 20 s.
        for seq in 0...25 {
            let now = Self.t0 + UInt64(seq) * Self.second
            lines += Self.dropCounts(m.segment(testSegment(seq: seq, capturedAt: now), now: now))
        }
        #expect(m.stats.dropped == 25)
        #expect(lines.map(\.since) == [1, 10, 10], "\(lines)")
        #expect(lines.map(\.total) == [1, 11, 21], "\(lines)")
        #expect(lines.map(\.since).reduce(0, +) == lines.last?.total)
    }

    @Test func unreadableServerMessagesAreLoggedAtMostOnceEveryTenSeconds() async throws {
        let count = 200
        let server = try await RawWebSocketServer { _ in
            Array(repeating: RawWebSocketServer.Step.text("not JSON {"), count: count)
                + [.text(#"{"type":"welcome","session":"s1","usage":{"remainingSeconds":null}}"#)]
        }
        let lines = LogLines()
        let uplink = Uplink(
            settings: .init(
                url: "ws://127.0.0.1:\(server.port)/v1/stream", token: "t0k3n", tls: nil,
                hello: .init(
                    device: "car-9", locale: "en-US", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000)),
                rules: .init(ping: .seconds(10), guidanceMaxAge: .seconds(60), queueSegments: 3, queueMaxAgeMs: 60_000)),
            logger: lines.logger)
        let started = ContinuousClock.now
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }
        for await message in uplink.messages {
            if case .welcome = message { break }
        }
        let elapsed = ContinuousClock.now - started
        let logged = lines.count(containing: "ignoring an unreadable server message")
        // However long the run took, at most one line per started 10 s.
        #expect(logged >= 1 && logged <= 1 + Int(elapsed / .seconds(10)), "\(logged) lines for \(count) messages in \(elapsed)")
        await uplink.shutdown()
        running.cancel()
        await server.stop()
    }
}
