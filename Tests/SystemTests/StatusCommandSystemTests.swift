import Agent
import Foundation
import Glibc
import TestSupport
import Testing

/// `status` and `say-status` against a running agent, and the spoken status it starts with.
@Suite struct StatusCommandSystemTests {
    @Test func statusShowsTheLiveAgentAndSayStatusSpeaksTheUsage() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        // Segments are sent and guidance kept however late they come: this test is about status,
        // and a busy machine can take longer than the defaults (15 s to deliver, 10 s to answer).
        let agent = try Spawned(
            "dashcam-agent",
            [
                "record", "--config",
                try files.agentConfig(
                    url: "ws://127.0.0.1:\(port)/v1/stream", uplink: ["queueMaxAgeMs": "120000"], extra: "guidance:\n  maxAgeMs: 120000")
            ],
            folder: files.folder)
        defer { agent.stop() }
        // The first segment (5 s) is answered with "slow down" by the script; the wait only stops a hang.
        try #require(await agent.wait(for: .seconds(120)) { $0.stderr.contains("guidance: segment 0") }, "\(agent.stderr.suffix(2000))")

        let json = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["status", "--json", "--socket", files.path("status.sock")])
        #expect(json.status == 0, "\(json.stderr)")
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(json.stdout.utf8))
        #expect(status.uplink.state == "connected")
        #expect(status.uplink.sent >= 1)
        #expect(status.camera.source == "test-pattern" && status.camera.segments >= 1)
        // The script answers "slow down", then clear, in turn: on a busy machine the next
        // segment's answer may have come before this request.
        let last = try #require(status.lastGuidance, "\(json.stdout)")
        #expect(last.seq == 0 ? last.text == "slow down" && !last.clear : last.text == "slow down" || last.clear, "\(last)")
        #expect(status.speech.output == "wav:\(files.path("speech"))")
        #expect(status.usageKnown && status.remainingSeconds == nil)

        let before = try FileManager.default.contentsOfDirectory(atPath: files.path("speech")).count
        let said = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["say-status", "--socket", files.path("status.sock")])
        #expect(said.stdout.contains(#""said":"Unlimited guidance.""#), "\(said.stdout) \(said.stderr)")
        #expect(
            await agent.wait(for: .seconds(60)) { _ in
                ((try? FileManager.default.contentsOfDirectory(atPath: files.path("speech")).count) ?? 0) > before
            }, "say-status wrote no new utterance")
        // The start was announced: ready, connected and the usage, in that order (one utterance
        // when the session opens within the gathering time of the first, else two).
        let spoken = agent.stderr.split(separator: "\n").compactMap { line in
            line.range(of: "[Agent] status: ").map { String(line[$0.upperBound...]) }
        }.filter { !$0.hasPrefix("answering on ") }.joined(separator: " ")
        #expect(spoken.hasPrefix("Dashcam ready. Connected to guidance. Unlimited guidance."), "\(spoken)")
        #expect(agent.stop() == 0)

        let gone = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["status", "--socket", files.path("status.sock")])
        #expect(gone.status == 66)
        #expect(gone.stderr.contains("no running agent answers on \(files.path("status.sock"))"))
    }
}
