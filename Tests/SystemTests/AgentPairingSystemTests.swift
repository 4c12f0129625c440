import Agent
import Foundation
@testable import GuidanceServer
import HAL
import Logging
import TestSupport
import Testing

/// A car with no token pairs itself: the real `dashcam-agent` against the real `guidance-server`
/// with pairing on. The car says its code (checked in the WAV it wrote, against eSpeak-ng's own
/// rendering of that text), the owner's side approves the code in the server's ledger, the car
/// stores its credentials (0600), says whose account it joined, and streams with its access token.
@Suite struct AgentPairingSystemTests {
    @Test(.timeLimit(.minutes(10))) func aCarWithoutATokenPairsByItsSpokenCodeAndStreams() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("script.yaml", "- clear: true\n")
        // Another car's static token: the tokens file stays in use beside pairing.
        try files.write("tokens.yaml", "other-token: car-9\n", mode: 0o600)
        _ = try files.serverConfig()
        let serverYAML = try String(contentsOfFile: files.path("server.yaml"), encoding: .utf8)
        try files.write("server.yaml", serverYAML + "pairing:\n  enabled: true\n  signingKeyFile: \(files.path("signing.key"))\n")
        let server = try Spawned("guidance-server", ["--config", files.path("server.yaml")], folder: files.folder)
        defer { server.stop() }
        try #require(await server.wait(for: .seconds(60)) { $0.stderr.contains("listening on") }, "\(server.stderr)")
        let port = Int(server.stderr.split(separator: "\n").first { $0.contains("listening on") }?.split(separator: ":").last ?? "") ?? 0

        // No token file, no credentials yet.
        try FileManager.default.removeItem(atPath: files.path("token"))
        _ = try files.agentConfig(
            url: "ws://127.0.0.1:\(port)/v1/stream", segmentSeconds: 1,
            uplink: ["credentialsFile": files.path("credentials.json")], extra: "haptics:\n  required: false\n")
        let agent = try Spawned("dashcam-agent", ["record", "--config", files.path("agent.yaml")], folder: files.folder)
        defer { agent.stop(SIGKILL) }
        let codeLine = #/pairing: enter the code (\d{3}) (\d{3}) (\d{3}) at (\S+)/#
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.firstMatch(of: codeLine) != nil }, "\(agent.stderr.suffix(3000))")
        let match = try #require(agent.stderr.firstMatch(of: codeLine))
        let code = "\(match.1)\(match.2)\(match.3)"
        #expect(match.4 == "http://127.0.0.1:\(port)/pair")
        // Recording never waited: segments are being written meanwhile.
        try #require(
            await agent.wait(for: .seconds(60)) { _ in
                ((try? FileManager.default.subpathsOfDirectory(atPath: files.path("segments"))) ?? []).contains { $0.hasSuffix(".mp4") }
            })

        // The code is said (twice, in groups of three) and `dashcam-agent pair` gives the same code.
        let phrase = StatusPhrase.pairingCode(code).text(language: "en")
        let saidCode: (Spawned) -> Bool = { $0.stderr.split(separator: "\n").contains { $0.contains("status: ") && $0.contains(phrase) } }
        try #require(await agent.wait(for: .seconds(60), until: saidCode), "\(agent.stderr.suffix(3000))")
        let pair = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path, ["pair", "--socket", files.path("status.sock")])
        #expect(
            pair.status == 0 && pair.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "\(match.1) \(match.2) \(match.3)",
            "\(pair.stdout) \(pair.stderr)")
        try #require(await agent.wait(for: .seconds(30)) { _ in Self.wavFiles(files).count >= 2 })
        // The phrase may be said together with another due at the same moment ("Dashcam ready."):
        // an utterance is a whole logged line. It is said more than once, and one saying may be
        // replaced by the next while it waits (a busy machine): any of them heard whole counts.
        let utterances = Set(
            agent.stderr.split(separator: "\n").filter { $0.contains("status: ") && $0.contains(phrase) }
                .compactMap { $0.components(separatedBy: "status: ").last })
        try #require(!utterances.isEmpty)
        var expected: [Int] = []
        for utterance in utterances { expected.append(try await LocalGuidanceSystemTests.reference(utterance, voice: "en-us")) }
        let heard = try Self.wavFiles(files).map { try LocalGuidanceSystemTests.samples(files.path("speech/\($0)")).count }
        // Within 3 %: eSpeak-ng's rendering depends on what it said before in the same process,
        // so the agent's saying of the phrase alone after "Dashcam ready. …" came out 1.3 % longer
        // than espeak-ng's own in one run (0.0–0.2 % in others). The other utterances differ by far more.
        #expect(
            heard.contains { count in expected.contains { abs(count - $0) * 100 <= $0 * 3 } }, "a WAV of \(expected) samples among \(heard)"
        )

        // The owner's side: an account, the code typed in lower case with spaces, approved.
        let store = try await SQLitePairingStore.open(path: files.path("usage.sqlite"), logger: Logger(label: "owner-side"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: now)
        let typed = try #require(DeviceCodes.normalize(" \(match.1) \(match.2) \(match.3) "))
        // The approval page names the car that asked (RFC 8628 §5.4).
        let looked = try await store.lookUp(userCode: typed, owner: owner, address: "127.0.0.1", nowMs: now)
        guard case .pending(let deviceName, _) = looked else { Issue.record("not pending: \(looked)"); return }
        #expect(deviceName == "loop-car")
        #expect(
            try await store.decide(userCode: typed, decision: .approve(owner: owner), owner: owner, address: "127.0.0.1", nowMs: now)
                == .decided)
        try await store.shutdown()

        // Paired: said with the account's name, stored privately, and streaming.
        let paired = StatusPhrase.paired(owner: "Ana").text(language: "en")
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.contains(paired) }, "\(agent.stderr.suffix(3000))")
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.contains("Connected to guidance.") }, "\(agent.stderr.suffix(3000))")
        let mode = try FileManager.default.attributesOfItem(atPath: files.path("credentials.json"))[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)
        let stored = try JSONDecoder().decode(
            DeviceCredentials.Stored.self, from: Data(contentsOf: URL(fileURLWithPath: files.path("credentials.json"))))
        #expect(stored.ownerName == "Ana" && stored.deviceId.hasPrefix("car-"))
        let again = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path, ["pair", "--socket", files.path("status.sock")])
        #expect(again.status == 1 && again.stderr.contains("already paired"), "\(again.stderr)")

        #expect(agent.stop(SIGTERM) == 0, "\(agent.stderr.suffix(2000))")
        // The agent's log names the code (it is the car's own journal); the server's never does.
        #expect(!server.stderr.contains(code) && !server.stderr.contains("\(match.1) \(match.2) \(match.3)"))
        #expect(!server.stderr.contains(stored.refreshToken) && !server.stderr.contains(stored.accessToken))
        #expect(!agent.stderr.contains(stored.refreshToken) && !agent.stderr.contains(stored.accessToken))
    }

    /// Access tokens that last a minute, a stream longer than that: the car sends each new token
    /// in the session (`auth`) and the session is never dropped for it.
    @Test(.timeLimit(.minutes(10))) func aLongStreamOutlivesItsAccessTokens() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("script.yaml", "- clear: true\n")
        try FileManager.default.removeItem(atPath: files.path("token"))
        _ = try files.serverConfig()
        let serverYAML = try String(contentsOfFile: files.path("server.yaml"), encoding: .utf8)
            .replacingOccurrences(of: "level: info", with: "level: debug")
        try files.write(
            "server.yaml",
            serverYAML + "pairing:\n  enabled: true\n  accessTokenSeconds: 60\n  signingKeyFile: \(files.path("signing.key"))\n")
        let server = try Spawned("guidance-server", ["--config", files.path("server.yaml")], folder: files.folder)
        defer { server.stop() }
        try #require(await server.wait(for: .seconds(60)) { $0.stderr.contains("listening on") }, "\(server.stderr)")
        let port = Int(server.stderr.split(separator: "\n").first { $0.contains("listening on") }?.split(separator: ":").last ?? "") ?? 0
        _ = try files.agentConfig(
            url: "ws://127.0.0.1:\(port)/v1/stream", segmentSeconds: 1,
            uplink: ["credentialsFile": files.path("credentials.json")], extra: "haptics:\n  required: false\n")
        let agent = try Spawned("dashcam-agent", ["record", "--config", files.path("agent.yaml")], folder: files.folder)
        defer { agent.stop(SIGKILL) }
        let codeLine = #/pairing: enter the code (\d{3}) (\d{3}) (\d{3})/#
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.firstMatch(of: codeLine) != nil }, "\(agent.stderr.suffix(3000))")
        let match = try #require(agent.stderr.firstMatch(of: codeLine))
        let store = try await SQLitePairingStore.open(path: files.path("usage.sqlite"), logger: Logger(label: "owner-side"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: now)
        let spoken = "\(match.1)\(match.2)\(match.3)"
        _ = try await store.lookUp(userCode: spoken, owner: owner, address: "127.0.0.1", nowMs: now)
        #expect(
            try await store.decide(userCode: spoken, decision: .approve(owner: owner), owner: owner, address: "127.0.0.1", nowMs: now)
                == .decided)
        try await store.shutdown()
        try #require(await agent.wait(for: .seconds(60)) { $0.stderr.contains("Connected to guidance.") }, "\(agent.stderr.suffix(3000))")
        let first = try JSONDecoder().decode(
            DeviceCredentials.Stored.self, from: Data(contentsOf: URL(fileURLWithPath: files.path("credentials.json"))))

        // Past the first token's end (the event waited for is the clock passing it), the session
        // is the one that opened, and the server took newer tokens in it.
        try #require(await server.wait(for: .seconds(150)) { _ in Int64(Date().timeIntervalSince1970) > first.accessExpiresAt + 5 })
        try #require(await server.wait(for: .seconds(30)) { $0.stderr.contains("access token renewed") }, "\(server.stderr.suffix(3000))")
        let status = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path, ["status", "--json", "--socket", files.path("status.sock")])
        let uplink = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["uplink"] as? [String: Any]
        #expect(uplink?["state"] as? String == "connected", "\(status.stdout)")
        #expect(uplink?["reconnects"] as? Int == 0, "\(status.stdout)")
        #expect(!server.stderr.contains("no longer authorized"), "\(server.stderr.suffix(3000))")
    }

    static func wavFiles(_ files: LoopFiles) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: files.path("speech"))) ?? []).filter { $0.hasSuffix(".wav") }.sorted()
    }
}
