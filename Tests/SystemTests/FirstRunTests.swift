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
        // A bound only a hang exceeds: on a busy machine three 1-s segments may take long.
        try #require(
            await agent.wait(for: .seconds(120)) { $0.stdout.split(separator: "\n").count >= 3 && $0.stderr.contains(spoken) },
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
        try #require(
            await agent.wait(for: .seconds(30)) { $0.stderr.contains("status: Connected to guidance.") }, "\(agent.stderr.suffix(3000))")
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
        let agent = try files.startRecorder(extra: "device:\n  locale: en-US\n")
        defer { agent.stop() }
        // The first segment closes after the socket is up.
        try #require(await agent.wait(for: .seconds(30)) { !$0.stdout.isEmpty }, "\(agent.stderr.suffix(2000))")
        let asRoot = try await Command.executeAsync(Self.agentBinary, ["status", "--socket", files.path("status.sock")])
        try #require(asRoot.status == 0, "\(asRoot.stderr)")
        let asNobody = try await Command.executeAsync(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Self.agentBinary, "status", "--socket", files.path("status.sock")
            ])
        #expect(asNobody.status == 66)
        #expect(
            asNobody.stderr.contains("permission denied on \(files.path("status.sock"))") && asNobody.stderr.contains("sudo"),
            "\(asNobody.stderr)")
        #expect(!asNobody.stderr.contains("no running agent"), "\(asNobody.stderr)")
        // With no server configured, say-status says so, in the device's language (en-US here).
        let said = try await Command.executeAsync(Self.agentBinary, ["say-status", "--socket", files.path("status.sock")])
        #expect(said.stdout.contains("Recording. No guidance server is set."), "\(said.stdout)\(said.stderr)")
    }

    struct DoctorReport: Decodable {
        struct Check: Decodable {
            var name: String
            var outcome: String
            var detail: String
            var fix: String?
        }
        var checks: [Check]
        func check(_ name: String) -> Check? { checks.first { $0.name == name } }
    }

    func doctor(_ files: LoopFiles, _ extra: [String] = []) async throws -> (Int32, DoctorReport, String) {
        let run = try await Command.executeAsync(Self.agentBinary, ["doctor", "--config", files.path("agent.yaml"), "--json"] + extra)
        let report = try JSONDecoder().decode(DoctorReport.self, from: Data(run.stdout.utf8))
        // Standard output is the report alone (decoded above); standard error only log lines,
        // FFmpeg's included.
        #expect(run.stderr.split(separator: "\n").allSatisfy(ProbeCommandTests.isLogLine), "\(run.stderr)")
        return (run.status, report, run.stdout + run.stderr)
    }

    /// What doctor tells a user about the server side: a token it accepts, one it refuses, none.
    @Test func doctorChecksTheTokenAndTheServerAndSaysHowToFixThem() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        _ = try files.agentConfig(url: "ws://127.0.0.1:\(port)/v1/stream", extra: "haptics:\n  required: false\n")

        let (status, report, output) = try await doctor(files)
        #expect(
            report.check("server")?.outcome == "ok" && report.check("server")?.detail.contains("accepted the token") == true, "\(output)")
        #expect(report.check("token")?.outcome == "ok", "\(output)")
        #expect(report.check("camera")?.outcome == "skipped", "the test pattern is no camera: \(output)")
        #expect(report.check("encoder")?.outcome == "ok" && report.check("encoder")?.detail.contains("libx265") == true, "\(output)")
        #expect(report.check("speaker")?.outcome == "ok" && report.check("speaker")?.detail.contains("Dashcam ready.") == true, "\(output)")
        #expect(report.check("voice")?.detail.contains("en-US") == true, "\(output)")
        #expect(report.check("recording")?.outcome == "ok", "\(output)")
        #expect(report.check("motor")?.outcome == "skipped", "\(output)")
        // The phrase went where speech goes.
        let spoken = (try? FileManager.default.contentsOfDirectory(atPath: files.path("speech"))) ?? []
        #expect(spoken.contains { $0.hasSuffix(".wav") }, "\(spoken)")
        // The clock is this machine's: whatever it says, nothing else failed.
        if report.check("clock")?.outcome != "failed" { #expect(status == 0, "\(output)") }

        try files.write("token", "not-the-servers-token\n", mode: 0o600)
        let (refusedStatus, refused, refusedOutput) = try await doctor(files, ["--quiet"])
        #expect(refusedStatus == 1)
        #expect(
            refused.check("server")?.outcome == "failed"
                && refused.check("server")?.detail.contains("refused the token (HTTP 401)") == true,
            "\(refusedOutput)")
        #expect(refused.check("speaker")?.outcome == "skipped", "--quiet: \(refusedOutput)")

        try FileManager.default.removeItem(atPath: files.path("token"))
        let (missingStatus, missing, missingOutput) = try await doctor(files, ["--quiet"])
        #expect(missingStatus == 1)
        #expect(
            missing.check("token")?.outcome == "failed" && missing.check("token")?.fix?.contains("guidance-server token add") == true,
            "\(missingOutput)")
        #expect(missing.check("server")?.outcome == "skipped", "\(missingOutput)")
    }
}
