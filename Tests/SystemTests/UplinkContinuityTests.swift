import Foundation
import Glibc
import TestSupport
import Testing

/// The real agent and server binaries with the link between them failing as it does on the road:
/// a path that goes dead, a peer that stops reading or answering, an upgrade that never comes, a
/// server killed with -9. Each test asserts what the driver and the fleet would notice: a new
/// session, and every recorded segment received by the server, none missing.
@Suite(.serialized) struct UplinkContinuityTests {
    /// 1 s segments, room to hold every segment of a long outage, and an age limit (2 minutes)
    /// that a busy machine's slow handovers never reach: nothing may be dropped.
    static let uplinkKeys = ["queueSegments": "30", "reconnectBackoffMs": "[100, 1000]", "queueMaxAgeMs": "120000"]

    static func startAgent(_ files: LoopFiles, url: String, prefix: [String] = []) throws -> Spawned {
        try Spawned(
            "dashcam-agent", ["record", "--config", try files.agentConfig(url: url, segmentSeconds: 1, uplink: uplinkKeys)],
            prefix: prefix, folder: files.folder)
    }

    /// Sequence numbers of the segments the agent recorded (its stdout lines).
    static func recorded(_ agent: Spawned) -> [Int] {
        agent.stdout.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: #""seq":"#) else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
    }

    /// Sequence numbers a server verified (first time or re-sent).
    static func received(_ servers: [Spawned]) -> Set<Int> {
        var seqs = Set<Int>()
        for server in servers {
            for line in server.stderr.split(separator: "\n") {
                guard let range = line.range(of: "segment "), line.contains(" verified") || line.contains("re-sent") else { continue }
                if let seq = Int(line[range.upperBound...].prefix { $0.isNumber }) { seqs.insert(seq) }
            }
        }
        return seqs
    }

    /// Stops the agent (SIGTERM: the last segment is sent and acknowledged) and checks that every
    /// segment it recorded reached a server.
    static func expectNoGaps(_ agent: Spawned, servers: [Spawned]) {
        #expect(agent.stop() == 0, "\(agent.stderr.suffix(2000))")
        let recorded = recorded(agent), received = received(servers)
        let missing = recorded.filter { !received.contains($0) }
        #expect(recorded.count >= 5, "\(agent.stdout)")
        #expect(missing.isEmpty, "recorded \(recorded), missing at the server \(missing); agent: \(agent.stderr.suffix(3000))")
        print(
            "recorded \(recorded.count) segments, every one received; \(agent.stderr.split(separator: "\n").last { $0.contains("uplink: sent") } ?? "")"
        )
    }

    static func sessions(_ server: Spawned) -> Int { server.count("opened", in: server.stderr) }

    @Test func aPeerThatGoesSilentIsLeftAndNothingIsLost() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        let link = try await FlakyLink(targetPort: port)
        let agent = try Self.startAgent(files, url: "ws://127.0.0.1:\(link.port)/v1/stream")
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { Self.received([$0]).count >= 2 }, "\(agent.stderr.suffix(2000))")
        link.goSilent(0)
        let silent = ContinuousClock.now
        try #require(await server.wait(for: .seconds(30)) { Self.sessions($0) == 2 }, "no new session: \(agent.stderr.suffix(2000))")
        print("silent peer left; new session at the server after \(ContinuousClock.now - silent)")
        // The agent noticed the silence itself: by a segment (or the welcome) unanswered, or, when
        // the silence began with nothing outstanding (a busy machine records more slowly), by pongs.
        #expect(
            agent.stderr.contains("no answer from the server") || agent.stderr.contains("no pong within two ping periods"),
            "\(agent.stderr.suffix(2000))")
        // Segments flow on the new session: waited for, not slept for.
        try #require(await server.wait(for: .seconds(60)) { Self.received([$0]).count >= 5 }, "\(agent.stderr.suffix(2000))")
        Self.expectNoGaps(agent, servers: [server])
        await link.stop()
    }

    @Test func aPeerThatStopsReadingIsLeftAndNothingIsLost() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        let link = try await FlakyLink(targetPort: port, receiveBuffer: 4096)
        // Lossless segments are large: the socket buffers fill within a segment or two.
        let agent = try Spawned(
            "dashcam-agent",
            [
                "record", "--config",
                try files.agentConfig(
                    url: "ws://127.0.0.1:\(link.port)/v1/stream", crf: 0, segmentSeconds: 1, uplink: Self.uplinkKeys)
            ], folder: files.folder)
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { Self.received([$0]).count >= 2 }, "\(agent.stderr.suffix(2000))")
        link.stopReading(0)
        let stopped = ContinuousClock.now
        try #require(await server.wait(for: .seconds(30)) { Self.sessions($0) == 2 }, "no new session: \(agent.stderr.suffix(2000))")
        print("peer that stopped reading left; new session at the server after \(ContinuousClock.now - stopped)")
        // Segments flow on the new session: waited for, not slept for.
        try #require(await server.wait(for: .seconds(60)) { Self.received([$0]).count >= 5 }, "\(agent.stderr.suffix(2000))")
        Self.expectNoGaps(agent, servers: [server])
        await link.stop()
    }

    @Test func anUpgradeThatNeverComesIsRetried() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        // The first connection is accepted and never answered; the next go through.
        let link = try await FlakyLink(targetPort: port) { $0 == 0 ? .neverAnswer : .forward }
        let started = ContinuousClock.now
        let agent = try Self.startAgent(files, url: "ws://127.0.0.1:\(link.port)/v1/stream")
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { Self.sessions($0) == 1 }, "no session: \(agent.stderr.suffix(2000))")
        print("upgrade never answered; a session after \(ContinuousClock.now - started) from the agent's start")
        #expect(link.connections == 2)
        #expect(agent.stderr.contains("no session within the connect deadline"))
        // Segments flow on the new session: waited for, not slept for.
        try #require(await server.wait(for: .seconds(60)) { Self.received([$0]).count >= 5 }, "\(agent.stderr.suffix(2000))")
        Self.expectNoGaps(agent, servers: [server])
        await link.stop()
    }

    @Test func aServerKilledWhileStreamingLosesNothing() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        var (server, port) = try await files.startServer()
        let agent = try Self.startAgent(files, url: "ws://127.0.0.1:\(port)/v1/stream")
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { Self.received([$0]).count >= 2 }, "\(agent.stderr.suffix(2000))")
        var servers = [server]
        for _ in 1...3 {
            server.stop(SIGKILL)
            // Down for a moment: segments recorded meanwhile are held and sent on the next session.
            try await Task.sleep(for: .milliseconds(1500))
            (server, _) = try await files.startServer(port: port)
            servers.append(server)
            try #require(await server.wait(for: .seconds(60)) { Self.received([$0]).count >= 2 }, "\(agent.stderr.suffix(2000))")
        }
        Self.expectNoGaps(agent, servers: servers)
        server.stop()
    }

    @Test(.enabled(if: TwoPaths.available, "needs root and network namespaces"))
    func linkADownAndTheRouteMovedOpensANewSessionAtOnceAndLosesNothing() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let paths = try TwoPaths()
        defer { paths.remove() }
        let (server, port) = try await files.startServer(prefix: paths.exec(in: paths.server), host: TwoPaths.serverAddress)
        defer { server.stop() }
        let agent = try Self.startAgent(files, url: "ws://\(TwoPaths.serverAddress):\(port)/v1/stream", prefix: paths.exec(in: paths.car))
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { Self.received([$0]).count >= 2 }, "\(agent.stderr.suffix(2000))")
        // Wi-Fi gone: its link drops (packets on it vanish) and the default route moves to LTE.
        let moved = ContinuousClock.now
        try paths.linkDown(1)
        try paths.switchToPath(2)
        try #require(await server.wait(for: .seconds(60)) { Self.sessions($0) >= 2 }, "no new session: \(agent.stderr.suffix(2000))")
        print("link A down, route moved → new session at the server after \(ContinuousClock.now - moved)")
        #expect(agent.stderr.contains("network changed"))
        // Segments flow on the new session: waited for, not slept for.
        try #require(await server.wait(for: .seconds(60)) { Self.received([$0]).count >= 5 }, "\(agent.stderr.suffix(2000))")
        Self.expectNoGaps(agent, servers: [server])
    }
}
