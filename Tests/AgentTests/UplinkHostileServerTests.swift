@testable import Agent
import Foundation
import GuidanceProtocol
import GuidanceServer
import HAL
import Hummingbird
import Logging
import Synchronization
import TestSupport
import Testing

/// The uplink against servers that misbehave: it logs, survives, reconnects.
@Suite struct UplinkHostileServerTests {
    static let logger = Logger(label: "uplink-hostile-test")

    func makeUplink(port: Int, token: String = "t0k3n", ping: Duration = .seconds(10)) -> Uplink {
        Uplink(
            settings: .init(
                url: "ws://127.0.0.1:\(port)/v1/stream", token: .literal(token), tls: nil,
                hello: .init(
                    device: "car-9", locale: "en-US", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000)),
                rules: .init(
                    backoff: Backoff(base: .milliseconds(50), cap: .milliseconds(200)), ping: ping,
                    guidanceMaxAge: .seconds(60), queueSegments: 3, queueMaxAgeMs: 60_000)),
            logger: Self.logger)
    }

    static func welcome(_ session: String) -> String {
        #"{"type":"welcome","session":"\#(session)","usage":{"remainingSeconds":null}}"#
    }

    @Test func garbageOversizeAndUnansweredPingsAreSurvived() async throws {
        let script: @Sendable (Int) -> [RawWebSocketServer.Step] = { connection in
            switch connection {
            case 0:
                // Everything unreadable first; the readable messages after it must still arrive.
                [
                    .text("this is not JSON {"), .text(#"{"type":"mystery","x":1}"#), .text(#"{"type":"ack","seq":"seven"}"#),
                    .text(#"{"type":"guidance","seq":1,"text":42}"#), .text("[1,2,3]"), .binary([0, 1, 2, 3]),
                    .text(Self.welcome("s1")),
                    .text(
                        #"{"type":"guidance","seq":4,"text":"pothole ahead","lang":"en","clear":false,"priority":"normal","extra":true}"#),
                    // A frame this big arriving before the upgrade completes fails the upgrade
                    // itself; after the first ping the session is surely running.
                    .awaitPing,
                    // Over the 64 KiB limit: the agent refuses it and drops the connection.
                    .text(String(repeating: "x", count: 1 << 20))
                ]
            case 1:
                // Welcomes, then never answers a ping: dead after two ping periods.
                [.text(Self.welcome("s2"))]
            default:
                [.text(Self.welcome("s\(connection + 1)")), .text(#"{"type":"usage","remainingSeconds":77}"#)]
            }
        }
        let server = try await RawWebSocketServer(script: script)
        let uplink = makeUplink(port: server.port, ping: .milliseconds(300))
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }

        var received: [ServerMessage] = []
        for await message in uplink.messages {
            received.append(message)
            if case .usage = message { break }
        }
        #expect(
            received == [
                .welcome(session: "s1", remainingSeconds: nil),
                .guidance(.init(seq: 4, text: "pothole ahead", lang: "en", clear: false, priority: .normal)),
                .welcome(session: "s2", remainingSeconds: nil),
                .welcome(session: "s3", remainingSeconds: nil),
                .usage(remainingSeconds: 77)
            ])
        #expect(server.connections == 3)
        #expect(await uplink.stats.sessions == 3)
        await uplink.shutdown()
        running.cancel()
        await server.stop()
    }

    @Test func shutdownClosesTheSessionWithGoingAway() async throws {
        let server = try await RawWebSocketServer { _ in [.text(Self.welcome("s1"))] }
        let uplink = makeUplink(port: server.port)
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }
        for await message in uplink.messages {
            if case .welcome = message { break }
        }
        await uplink.shutdown()
        await running.value
        let deadline = ContinuousClock.now + .seconds(5)
        while server.closeCodes.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(server.closeCodes == [1001], "the close frame says the device is going away")
        #expect(server.connections == 1, "and it does not reconnect")
        await server.stop()
    }

    @Test func aWrongTokenIsReportedAsAnAuthFailureAndRetriedOnlyMuchLater() async throws {
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0), tokens: StaticDeviceTokens(["right": "car-9"]),
            analyzer: ScriptedAnalyzer(items: [.init(text: "never", lang: "en", clear: false, priority: .normal)], order: .order),
            ledger: SQLiteLedger(path: ":memory:", logger: Self.logger), logger: Self.logger)
        let port = Mutex(0)
        let app = try ServerApplication(stream: server).build { bound in port.withLock { $0 = bound } }
        let serving = Task { try await app.run() }
        defer { serving.cancel() }
        while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }

        let uplink = makeUplink(port: port.withLock { $0 }, token: "wrong")
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }
        var states = uplink.states.makeAsyncIterator()
        var seen: [Uplink.ConnectionState] = []
        while let state = await states.next() {
            seen.append(state)
            if case .authenticationFailed = state { break }
        }
        // A long wait with jitter (45–75 s), so a fleet refused together does not return together.
        guard case .authenticationFailed(let wait) = seen.last else { Issue.record("\(seen)"); return }
        #expect(seen.count == 1 && wait >= .seconds(45) && wait <= .seconds(75), "\(seen)")
        // The ordinary backoff here is at most 200 ms: a second attempt within 2 s means the
        // refusal was not treated as one.
        try await Task.sleep(for: .seconds(2))
        #expect(await uplink.stats.reconnects == 1)
        #expect(await uplink.state == .authenticationFailed(retryIn: wait))
        await uplink.shutdown()
        await running.value
        #expect(await uplink.state == .stopped)
    }
}
