@testable import Agent
import Foundation
import Glibc
import TestSupport
import Testing

/// The running agent: `protect` over its control socket, and SIGHUP.
@Suite(.serialized) struct ProtectAndReloadTests {
    func lines(_ agent: Spawned) -> Int { agent.wholeLines.count }

    func agentCommand(_ arguments: [String], _ loop: LoopFiles) async throws -> Command.Result {
        try await Command.executeAsync(RecordCommandTests.agent, arguments + ["--socket", loop.path("status.sock")])
    }

    @Test func protectKeepsASegmentAndTheLastSecondsAsTheyClose() async throws {
        let loop = try LoopFiles()
        defer { loop.remove() }
        let agent = try loop.startRecorder()
        #expect(await agent.wait(for: .seconds(60)) { self.lines($0) >= 3 }, "\(agent.stderr)")

        let one = try await agentCommand(["protect", "1"], loop)
        #expect(one.status == 0, "\(one.stderr)")
        let moved = try #require(one.stdout.split(separator: "\n").first { $0.contains("protected/") }).trimmingCharacters(in: .whitespaces)
        #expect(moved.contains("/000001-"), "\(one.stdout)")
        let probed = try FFprobe.probe(URL(fileURLWithPath: loop.path("recordings/\(moved)")))
        // Whole: the frames its line says (a busy machine's camera drops some, and the line counts them).
        let line = try #require(
            agent.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }.first { $0["seq"] as? Int == 1 })
        #expect(probed.codec == "hevc" && probed.frames == line["frames"] as? Int, "\(probed) \(line)")
        #expect((line["frames"] as? Int ?? 0) + (line["droppedFrames"] as? Int ?? 0) == 10, "\(line)")

        // Asked well inside a segment: a segment closes one frame before its nominal end, and a
        // request in that gap ends before the next segment starts, so it keeps nothing pending.
        let closed = lines(agent)
        #expect(await agent.wait(for: .seconds(30)) { self.lines($0) > closed })
        try await Task.sleep(for: .milliseconds(300))
        let last = try await agentCommand(["protect", "--last", "2s", "--json"], loop)
        #expect(last.status == 0, "\(last.stderr)")
        let reply = try JSONDecoder().decode(RecordingStore.Protection.self, from: Data(last.stdout.utf8))
        let untilMs = try #require(reply.pendingUntilMs, "the segment in progress is kept when it closes: \(last.stdout)")
        let until = Date(timeIntervalSince1970: Double(untilMs) / 1000)
        let range = until.addingTimeInterval(-2)...until

        // Which segments the two seconds cover depends on how far behind the clock the recorder
        // runs on a busy machine, so the test reads the capture times in the names: once a
        // segment that starts after the request is on disk, every segment the request covers
        // has closed, and each one, and only those and segment 1, must be in protected/.
        let folder = URL(fileURLWithPath: loop.path("recordings"))
        // The pattern's frames carry the times they were made for, and on a busy machine the
        // recorder has run more than a minute behind the clock: the wait is for that segment,
        // with a guard against a hang only.
        #expect(
            await agent.wait(for: .seconds(600)) { _ in StoredSegment.all(in: folder).contains { $0.capturedAt > until } },
            "\(agent.stderr)")
        let stored = StoredSegment.all(in: folder)
        let covered = stored.filter { $0.capturedAt <= range.upperBound && $0.capturedAt.addingTimeInterval(1) > range.lowerBound }
        #expect(!covered.isEmpty)
        let expected = Set(covered.map(\.name)).union([String(moved.split(separator: "/").last ?? "")])
        #expect(
            Set(stored.filter(\.isProtected).map(\.name)) == expected,
            "segment 1, and the two seconds up to \(untilMs): \(stored.map(\.path))")

        let status = try await agentCommand(["status", "--json"], loop)
        let recording = try #require(
            (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["recording"] as? [String: Any])
        let protectedCount = try #require(recording["protectedSegments"] as? Int)
        #expect(protectedCount == expected.count, "\(recording)")
        #expect(files(under: URL(fileURLWithPath: loop.path("recordings/protected"))).count == protectedCount)

        let none = try await agentCommand(["protect", "999"], loop)
        #expect(none.status == 66 && none.stderr.contains("no recorded segment matches '999'"), "\(none.stderr)")
        let bad = try await agentCommand(["protect", "9:30"], loop)
        #expect(bad.status == 64 && bad.stderr.contains("'9:30' is not a time"), "\(bad.stderr)")
        #expect(agent.stop() == 0, "\(agent.stderr)")
    }

    @Test func sighupAppliesWhatItCanAndSurvivesABrokenConfig() async throws {
        let loop = try LoopFiles()
        defer { loop.remove() }
        let agent = try loop.startRecorder()
        #expect(await agent.wait(for: .seconds(60)) { self.lines($0) >= 1 }, "\(agent.stderr)")
        let config = try String(contentsOfFile: loop.path("agent.yaml"), encoding: .utf8)

        try loop.write(
            "agent.yaml",
            config.replacingOccurrences(of: "fps: 10", with: "fps: 5")
                + "\nlog:\n  level: debug\nhaptics:\n  clear: [300]\n")
        kill(agent.pid, SIGHUP)
        #expect(
            await agent.wait(for: .seconds(60)) { $0.stderr.contains("config: reloaded; applied haptics.clear, log.level") },
            "\(agent.stderr)")
        #expect(agent.stderr.contains("camera.fps changed and take effect only after a restart"))

        try loop.write("agent.yaml", config + "\nhaptics:\n  clear: [0]\n")
        kill(agent.pid, SIGHUP)
        #expect(await agent.wait(for: .seconds(60)) { $0.stderr.contains("config: not reloaded") }, "\(agent.stderr)")
        #expect(agent.stderr.contains("haptics.clear: '[0]' is not allowed"))

        // Still recording, at the frame rate it started with.
        let before = lines(agent)
        #expect(await agent.wait(for: .seconds(30)) { self.lines($0) >= before + 2 }, "\(agent.stderr)")
        #expect(agent.wholeLines.last?.contains("\"fps\":10") == true)
        #expect(agent.stop() == 0, "\(agent.stderr)")
    }
}
