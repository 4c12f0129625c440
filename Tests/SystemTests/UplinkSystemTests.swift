import Agent
import Foundation
import Glibc
import TestSupport
import Testing

/// The real `dashcam-agent` and `guidance-server` binaries, as separate processes.
@Suite(.serialized) struct UplinkSystemTests {
    @Test func twentyServerRestartsLeakNoSocketsOrThreadsInTheAgent() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        var (server, port) = try await files.startServer()
        let agent = try Spawned(
            "dashcam-agent",
            [
                "record", "--config",
                try files.agentConfig(url: "ws://127.0.0.1:\(port)/v1/stream", uplink: ["reconnectBackoffMs": "[50, 300]"])
            ],
            folder: files.folder)
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { $0.stderr.contains("opened") }, "no session: \(agent.stderr)")

        var baseline: (fds: Int, threads: Int, rssKiB: Int)?
        for restart in 1...20 {
            server.stop(SIGKILL)
            (server, _) = try await files.startServer(port: port)
            let reconnected = await server.wait(for: .seconds(60)) { $0.stderr.contains("opened") }
            try #require(reconnected, "restart \(restart): the agent did not come back: \(agent.stderr.suffix(2000))")
            if restart == 2 { baseline = agent.resources }
        }
        let after = agent.resources
        let before = try #require(baseline)
        // A leaked session would hold a socket (and its event-loop work) per restart: 18 more.
        #expect(after.fds <= before.fds + 2, "fds \(before.fds) → \(after.fds)")
        #expect(after.threads <= before.threads + 2, "threads \(before.threads) → \(after.threads)")
        #expect(agent.process.isRunning)
        server.stop()
        #expect(agent.stop() == 0)
    }

    /// `systemctl restart guidance-server`: SIGTERM. The server closes every session with 1012 before
    /// it stops listening; the car waits a random part of its `uplink.restartSpreadMs` (here 3 s)
    /// instead of the backoff's 250 ms, comes back to the new server, and every segment it
    /// recorded is verified by one server or the other, none dropped.
    @Test func aServerRestartClosesWith1012AndTheCarComesBackWithinItsSpreadLosingNothing() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        var (server, port) = try await files.startServer()
        let agent = try Spawned(
            "dashcam-agent",
            // Segments wait for the new server as long as it takes to start on a busy machine (at a
            // load average of 10, over the default 15 s): what is tested is the 1012 and the spread.
            [
                "record", "--config",
                try files.agentConfig(
                    url: "ws://127.0.0.1:\(port)/v1/stream",
                    uplink: ["restartSpreadMs": "3000", "queueMaxAgeMs": "300000"])
            ],
            folder: files.folder)
        defer { agent.stop() }
        try #require(
            await server.wait(for: .seconds(120)) { $0.stderr.contains("verified") }, "no segment verified: \(agent.stderr.suffix(2000))")
        let first = server
        #expect(first.stop() == 0, "\(first.stderr.suffix(2000))")
        #expect(first.stderr.contains("1 session(s) told the server is restarting (1012)"), "\(first.stderr.suffix(2000))")
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.contains("close 1012") }, "\(agent.stderr.suffix(2000))")
        // The wait it chose: "reconnecting in 45 ms" or "in 1.2 s", within the spread.
        let notice = try #require(agent.stderr.split(separator: "\n").first { $0.contains("close 1012") })
        let wait = try #require(notice.range(of: "reconnecting in ").map { notice[$0.upperBound...].prefix { $0 != "(" } })
        let parts = wait.split(separator: " ")
        let ms = try #require(parts.first.flatMap { Double($0) }.map { parts.dropFirst().first == "ms" ? $0 : $0 * 1000 }, "\(notice)")
        #expect((0...3000).contains(ms), "\(notice)")

        (server, _) = try await files.startServer(port: port)
        defer { server.stop() }
        // Two segments on the new server: what was kept while it was down, and one recorded after.
        try #require(await server.wait(for: .seconds(180)) { $0.count("verified", in: $0.stderr) >= 2 }, "\(agent.stderr.suffix(2000))")
        #expect(agent.stop() == 0)
        let seqs = UplinkContinuityTests.received([first, server])
        let highest = try #require(seqs.max())
        #expect(seqs == Set(0...highest), "verified: \(seqs.sorted())")
        let summary = try #require(agent.stderr.split(separator: "\n").last { $0.contains("uplink: sent") }, "\(agent.stderr.suffix(2000))")
        #expect(summary.contains("dropped 0"), "\(summary)")
        print("server restart: the car waited \(wait)of up to 3 s; segments 0...\(highest) verified across the two servers")
    }

    @Test func aServerThatStopsReadingLeavesMemoryFlatAndDropsAreCounted() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        // Takes the upgrade, then never reads again (each new session too). Lossless segments at full speed (about
        // 13 MB a minute) fill the socket buffers on both ends within seconds.
        let server = try await RawWebSocketServer(receiveBuffer: 4096) { _ in [.stopReading] }
        let agent = try Spawned(
            "dashcam-agent",
            ["record", "--config", try files.agentConfig(url: "ws://127.0.0.1:\(server.port)/v1/stream", pace: "fast", crf: 0)],
            folder: files.folder)
        try await Task.sleep(for: .seconds(20))
        let early = agent.resources
        try await Task.sleep(for: .seconds(40))
        let late = agent.resources
        // More segments than the queue holds (3), many times over: waited for, not expected of a
        // minute (an idle machine here made 199 in it, a busy CI machine with slower cores 26, one
        // whose cores a VM held 10).
        try #require(await agent.wait(for: .seconds(600)) { $0.stdout.split(separator: "\n").count > 10 }, "\(agent.stderr.suffix(2000))")
        // This server never acknowledges: every recorded segment is only on disk.
        let json = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["status", "--json", "--socket", files.path("status.sock")])
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(json.stdout.utf8))
        #expect(
            status.uplink.acked == 0 && status.uplink.notSent == status.camera.segments && status.camera.segments > 10,
            "\(json.stdout)")
        #expect(agent.stop() == 0)
        await server.stop()

        let produced = agent.stdout.split(separator: "\n").count
        let summary = try #require(agent.stderr.split(separator: "\n").last { $0.contains("uplink: sent") }, "\(agent.stderr.suffix(2000))")
        func number(after word: String) -> Int {
            guard let range = summary.range(of: word + " ") else { return -1 }
            return Int(summary[range.upperBound...].prefix { $0.isNumber }) ?? -1
        }
        let acked = number(after: "acked"), dropped = number(after: "dropped"), sessions = number(after: "sessions")
        #expect(dropped > 0)
        // Nothing is acknowledged, so every segment is dropped and counted, or still held (at most
        // uplink.queueSegments, 3) when the agent stops: sent is not enough to let one go.
        #expect(acked == 0 && (0...3).contains(produced - dropped), "produced \(produced), acked \(acked), dropped \(dropped)")
        // The silence is noticed: the session is given up and others tried, not held for the whole minute.
        #expect(sessions >= 3, "\(summary)")
        #expect(late.rssKiB - early.rssKiB < 12 * 1024, "RSS \(early.rssKiB) KiB at 20 s, \(late.rssKiB) KiB at 60 s")
        print(
            "stalled server: produced \(produced), sessions \(sessions), dropped \(dropped); RSS \(early.rssKiB) KiB at 20 s, \(late.rssKiB) KiB at 60 s"
        )
    }

    @Test func sigtermSendsTheLastSegmentThenClosesWithGoingAway() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let welcome = #"{"type":"welcome","session":"s1","usage":{"remainingSeconds":null}}"#
        let server = try await RawWebSocketServer { _ in [.text(welcome)] }
        let agent = try Spawned(
            "dashcam-agent",
            ["record", "--config", try files.agentConfig(url: "ws://127.0.0.1:\(server.port)/v1/stream", segmentSeconds: 1)],
            folder: files.folder)
        try #require(await agent.wait(for: .seconds(30)) { $0.stdout.split(separator: "\n").count >= 2 }, "\(agent.stderr.suffix(2000))")
        let stopped = ContinuousClock.now
        #expect(agent.stop() == 0)
        let took = ContinuousClock.now - stopped
        let recorded = agent.stdout.split(separator: "\n").count
        // hello, then a header and one chunk per segment, the one closed by the stop included.
        #expect(server.dataFrames == 1 + 2 * recorded, "\(server.dataFrames) frames for \(recorded) segments")
        #expect(server.closeCodes == [1001], "\(server.closeCodes)")
        // This server never acknowledges: the drain (uplink.drainMs) runs out, and the agent ends.
        print("SIGTERM → exit \(took) (drain unanswered); \(recorded) segments, all sent, close 1001")
        await server.stop()
    }

    @Test(.enabled(if: TwoPaths.available, "needs root and network namespaces"))
    func movingTheCarsDefaultRouteOpensANewSessionOverTheOtherPath() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let paths = try TwoPaths()
        defer { paths.remove() }
        let (server, port) = try await files.startServer(prefix: paths.exec(in: paths.server), host: TwoPaths.serverAddress)
        defer { server.stop() }
        let agent = try Spawned(
            "dashcam-agent",
            ["record", "--config", try files.agentConfig(url: "ws://\(TwoPaths.serverAddress):\(port)/v1/stream")],
            prefix: paths.exec(in: paths.car), folder: files.folder)
        defer { agent.stop() }
        try #require(await server.wait(for: .seconds(30)) { $0.count("opened", in: $0.stderr) == 1 }, "no session: \(agent.stderr)")
        // The old path stays up, so its TCP connection would live on: only the route change can
        // make the agent open a second session.
        let moved = ContinuousClock.now
        try paths.switchToPath(2)
        let reopened = await server.wait(for: .seconds(60)) { $0.count("opened", in: $0.stderr) == 2 }
        let elapsed = ContinuousClock.now - moved
        try #require(reopened, "no new session after the route moved: \(agent.stderr.suffix(2000))")
        print("route moved → the server logged the new session after \(elapsed)")
        #expect(agent.stderr.contains("network changed"))
        #expect(agent.stderr.contains("moved from va1 to va2"), "\(agent.stderr.suffix(1000))")
        // The server lets the old session go: the agent's 1001 ends it, or the new one supersedes it.
        #expect(
            await server.wait(for: .seconds(60)) { $0.stderr.contains("ended") || $0.stderr.contains("superseded") },
            "\(server.stderr.suffix(2000))")
        #expect(agent.stop() == 0)
    }
}
