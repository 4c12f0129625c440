import Agent
import Foundation
import Glibc
import TestSupport
import Testing

/// The running agent's control socket against bad input: idle clients under a small file limit,
/// and `protect` requests with no real end.
@Suite(.serialized) struct ControlSocketAgentTests {
    /// How long a request is tried again. A user's 10 s is not enough on a machine so busy that
    /// the agent's event loop does not read a request within its 2-s read timeout, again and again.
    static let patience = Duration.seconds(120)

    func segmentLines(_ agent: Spawned) -> [[String: Any]] {
        agent.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func underAFileLimitOf128IdleClientsStopNeitherTheSegmentFilesNorTheAnswers() async throws {
        let loop = try LoopFiles()
        defer { loop.remove() }
        // Started by hand with a umask that lets anyone at a new file.
        let agent = try loop.startRecorder(prefix: ["/bin/sh", "-c", #"ulimit -n 128 && umask 0 && exec "$0" "$@""#])
        // The socket is the agent user's alone from the moment it has its name.
        #expect(await agent.wait(for: .seconds(60)) { _ in FileManager.default.fileExists(atPath: loop.path("status.sock")) })
        var info = stat()
        #expect(
            lstat(loop.path("status.sock"), &info) == 0 && info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
        #expect(await agent.wait(for: .seconds(60)) { self.segmentLines($0).count >= 1 }, "\(agent.stderr)")

        // More idle clients than the agent has descriptors.
        var idle: [UnixClient] = []
        for _ in 0..<200 {
            guard let client = UnixClient(path: loop.path("status.sock")) else { break }
            idle.append(client)
        }
        #expect(idle.count == 200, "connect failed: \(String(cString: strerror(errno)))")
        let before = segmentLines(agent).count
        #expect(await agent.wait(for: .seconds(60)) { self.segmentLines($0).count >= before + 3 }, "\(agent.stderr)")
        let written = segmentLines(agent).dropFirst(before)
        #expect(written.allSatisfy { $0["file"] is String }, "every segment has its file: \(Array(written))")
        #expect(!agent.stderr.contains("Too many open files"), "\(agent.stderr)")
        #expect(agent.resources.fds < 128)

        // The agent works through the 200 (busy replies, read timeouts) before it reads this one.
        let status = try await StatusSocket.ask("status", path: loop.path("status.sock"), patience: Self.patience)
        #expect(status.contains("\"recording\""), "\(status)")
        #expect(agent.stderr.contains("over the cap of 8"), "the refusals are logged: \(agent.stderr)")
        idle.removeAll()
        #expect(agent.stop() == 0, "\(agent.stderr)")
    }

    @Test func protectRefusesARangeWithNoRealEndAndFilesNothingAsProtected() async throws {
        let loop = try LoopFiles()
        defer { loop.remove() }
        let agent = try loop.startRecorder()
        #expect(await agent.wait(for: .seconds(60)) { self.segmentLines($0).count >= 2 }, "\(agent.stderr)")

        // Straight to the socket, as any local program could.
        let open = try await StatusSocket.ask("protect time 0 9223372036854775807", path: loop.path("status.sock"), patience: Self.patience)
        #expect(open.contains("may end at most 5 minutes ahead"), "\(open)")
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let long = try await StatusSocket.ask(
            "protect time \(nowMs - 25 * 3_600_000) \(nowMs)", path: loop.path("status.sock"), patience: Self.patience)
        #expect(long.contains("protect at most 24 hours at once"), "\(long)")

        // The command line says so before asking.
        let ahead = Date().addingTimeInterval(600).formatted(Date.ISO8601FormatStyle())
        let typed = try await Command.executeAsync(
            RecordCommandTests.agent, ["protect", "now..\(ahead)", "--socket", loop.path("status.sock")])
        #expect(typed.status != 0)
        #expect(typed.stderr.contains("the range ends 10 minutes from now; it may end at most 5 minutes ahead"), "\(typed.stderr)")

        // Nothing was left pending: the segments that follow stay in the loop.
        let before = segmentLines(agent).count
        #expect(await agent.wait(for: .seconds(60)) { self.segmentLines($0).count >= before + 3 }, "\(agent.stderr)")
        let reply = try await StatusSocket.ask("status", path: loop.path("status.sock"), patience: Self.patience)
        let recording = try #require(
            (try JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any])?["recording"] as? [String: Any])
        #expect(recording["protectedSegments"] as? Int == 0, "\(recording)")
        #expect(files(under: URL(fileURLWithPath: loop.path("recordings/protected"))).isEmpty)
        #expect(agent.stop() == 0, "\(agent.stderr)")
    }
}
