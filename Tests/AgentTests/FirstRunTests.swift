import Agent
import GuidanceProtocol
import Foundation
import Glibc
import TestSupport
import Testing

/// What a first install meets before everything is in place: the recording never waits for the
/// server side.
@Suite(.serialized) struct FirstRunTests {
    static let agentBinary = Spawned.buildFolder.appendingPathComponent("dashcam-agent").path

    @Test func withoutATokenFileTheAgentRecordsSaysSoOnceAndConnectsOnceTheTokenIsThere() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try FileManager.default.removeItem(atPath: files.path("token"))
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        let agent = try Spawned(
            "dashcam-agent", ["record", "--config", try files.agentConfig(url: "ws://127.0.0.1:\(port)/v1/stream", segmentSeconds: 1)],
            folder: files.folder)
        defer { agent.stop() }
        // Gathered with "Dashcam ready." into one utterance when both are due at once.
        let spoken = "No device token. Recording continues without guidance."
        // Recording goes on: segments close while the uplink has no token.
        try #require(await agent.wait(for: .seconds(30)) { $0.stdout.split(separator: "\n").count >= 3 && $0.stderr.contains(spoken) },
                     "\(agent.stderr.suffix(3000))")
        #expect(agent.process.isRunning)

        let json = try await Command.executeAsync(Self.agentBinary, ["status", "--json", "--socket", files.path("status.sock")])
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(json.stdout.utf8))
        #expect(status.uplink.state == "no token", "\(json.stdout)")
        #expect(status.uplink.problem?.contains("\(files.path("token")): No such file or directory") == true, "\(json.stdout)")
        #expect(!server.stderr.contains("opened"), "nothing reached the server without a token")

        // The user puts the token in place: no restart, the uplink reads the file again.
        try files.write("token", files.token + "\n", mode: 0o600)
        try #require(await server.wait(for: .seconds(60)) { $0.stderr.contains("opened") }, "\(agent.stderr.suffix(3000))")
        try #require(await agent.wait(for: .seconds(30)) { $0.stderr.contains("status: Connected to guidance.") }, "\(agent.stderr.suffix(3000))")
        let lines = agent.stderr.split(separator: "\n")
        #expect(lines.filter { $0.contains(spoken) }.count == 1, "said once, not at every retry")
        #expect(lines.filter { $0.contains("no guidance until the device has a token") }.count == 1, "logged once, not at every retry")
        #expect(agent.stop() == 0)
    }

    @Test func bothProgramsTellTheirVersion() async throws {
        for program in ["dashcam-agent", "guidance-server"] {
            let run = try await Command.executeAsync(Spawned.buildFolder.appendingPathComponent(program).path, ["--version"])
            #expect(run.status == 0, "\(program): \(run.stderr)")
            #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == ReleaseVersion.current, "\(program)")
        }
    }

    /// The socket is the agent's user's alone: anyone else is told to use sudo, not that no agent runs.
    @Test func statusAsAnotherUserExplainsThePermissionProblem() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let agent = try files.startRecorder()
        defer { agent.stop() }
        // The first segment closes after the socket is up.
        try #require(await agent.wait(for: .seconds(30)) { !$0.stdout.isEmpty }, "\(agent.stderr.suffix(2000))")
        let asRoot = try await Command.executeAsync(Self.agentBinary, ["status", "--socket", files.path("status.sock")])
        try #require(asRoot.status == 0, "\(asRoot.stderr)")
        let asNobody = try await Command.executeAsync("setpriv", [
            "--reuid=65534", "--regid=65534", "--clear-groups", Self.agentBinary, "status", "--socket", files.path("status.sock"),
        ])
        #expect(asNobody.status == 66)
        #expect(asNobody.stderr.contains("permission denied on \(files.path("status.sock"))") && asNobody.stderr.contains("sudo"),
                "\(asNobody.stderr)")
        #expect(!asNobody.stderr.contains("no running agent"), "\(asNobody.stderr)")
    }
}
