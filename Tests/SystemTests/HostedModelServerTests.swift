import Foundation
import GuidanceProtocol
import TestSupport
import Testing

/// The built `guidance-server` with `analyzer.kind: gemini`, in its own process, in front of a
/// loopback stand-in of the Gemini API: a device's segment goes out as the service's request and
/// its answer comes back as guidance; a service that is down gives `guidance_unavailable`.
@Suite(.serialized) struct HostedModelServerTests {
    static let key = "stand-in-key-0f3a9c"

    static func keyFile(in folder: URL, mode: Int = 0o600) throws -> String {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try ServerProcess.write(folder, "gemini.key", key + "\n", mode: mode)
        return folder.appendingPathComponent("gemini.key").path
    }

    /// Sends `count` copies of the sample segment (seq 0…) and reads until `needle` has been seen
    /// `count` times, or the read times out.
    static func stream(port: Int, count: Int, until needle: String) async throws -> [String] {
        let data = Array(await SampleSegment.data())
        return try await ServerHardeningTests.offPool {
            let client = try RawClient(port: port, receiveTimeoutMs: 90_000)
            guard try client.upgrade(token: "good-token").status == 101 else { return [] }
            try client.sendText(
                ClientMessage.hello(
                    .init(
                        device: "car-1", locale: "ko-KR", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 2000),
                        stream: "s-1")
                ).encoded())
            var texts = try client.readTexts(until: "welcome")
            let sha = sha256Hex(data)
            for seq in 0..<count {
                try client.sendText(
                    ServerHardeningTests.header(
                        seq: seq, durationMs: 2000, bytes: data.count,
                        chunks: (data.count + 65535) / 65536, sha: sha, frames: 20))
                for start in stride(from: 0, to: data.count, by: 65536) {
                    try client.sendFrame(.binary, Array(data[start..<min(start + 65536, data.count)]))
                }
                // One at a time, so that no segment replaces another still waiting.
                texts += try client.readTexts(until: needle)
            }
            return texts
        }
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aSegmentBecomesAGeminiRequestAndItsAnswerTheDevicesGuidance() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.answer(GeminiReplies.sampleAnswer, promptTokens: 700, outputTokens: 20)])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gemini-\(UUID().uuidString)")
        try await standIn.serve { url in
            let server = try await ServerProcess(
                analyzer: [
                    // The stand-in answers from this busy test process: the longest wait allowed, so the
                    // answer is judged, not how soon it came.
                    "kind": "gemini", "endpoint": "\(url)/v1beta", "apiKeyFile": try Self.keyFile(in: folder), "timeoutMs": "60000"
                ], folder: folder)
            let texts = try await Self.stream(port: server.port, count: 1, until: "guidance")
            let guidance = try #require(texts.last)
            #expect(
                guidance.contains("\"type\":\"guidance\"") && guidance.contains("보행자가 있습니다") && guidance.contains("\"urgent\""),
                "\(texts)")
            #expect(texts.contains { $0.contains("\"ack\"") })
            let usage = try await Command.executeAsync(
                Spawned.buildFolder.appendingPathComponent("guidance-server").path,
                ["usage", "car-1", "--json", "--config", folder.appendingPathComponent("server.yaml").path])
            #expect(
                usage.stdout.contains("\"inputTokens\":700") && usage.stdout.contains("\"outputTokens\":20"),
                "\(usage.stdout) \(usage.stderr)")
            #expect(!server.process.stderr.contains(Self.key), "the API key was logged")
        }
        let request = try #require(standIn.requests.first)
        #expect(request.headers["x-goog-api-key"] == Self.key)
        let parts = (request.json["contents"] as? [[String: Any]])?.first?["parts"] as? [[String: Any]]
        let inline = parts?.first?["inline_data"] as? [String: Any]
        #expect(Data(base64Encoded: inline?["data"] as? String ?? "") == (await SampleSegment.data()), "the clip went out byte for byte")
        try? FileManager.default.removeItem(at: folder)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aServiceThatIsDownGivesGuidanceUnavailableAndSegmentsAreStillAcknowledged() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.error(503, "UNAVAILABLE")])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gemini-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await standIn.serve { url in
            let server = try await ServerProcess(
                analyzer: [
                    "kind": "gemini", "endpoint": "\(url)/v1beta", "apiKeyFile": try Self.keyFile(in: folder), "timeoutMs": "3000"
                ], folder: folder)
            let texts = try await Self.stream(port: server.port, count: 5, until: "\"error\"")
            let acks = texts.filter { $0.contains("\"ack\"") }.count
            let unavailable = texts.filter { $0.contains("guidance_unavailable") }.count
            #expect(acks == 5, "\(texts)")
            // The first segments fail one by one; from the one that opens the breaker on, each says unavailable.
            #expect(unavailable == 3, "\(texts)")
            #expect(server.isRunning)
        }
    }

    @Test(arguments: [("mode", 0o644, "chmod 600"), ("missing", -1, "analyzer.apiKeyFile")])
    func anAPIKeyFileThatIsMissingOrNotPrivateExits78(name: String, mode: Int, says: String) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gemini-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = try Self.keyFile(in: folder, mode: mode < 0 ? 0o600 : mode)
        try ServerProcess.write(folder, "tokens.yaml", "good-token: car-1\n", mode: 0o600)
        try ServerProcess.write(
            folder, "server.yaml",
            """
            server:
              port: 0
              tokensFile: \(folder.appendingPathComponent("tokens.yaml").path)
            analyzer:
              kind: gemini
            \(mode < 0 ? "" : "  apiKeyFile: \(keyFile)")
            ledger: sqlite:\(folder.appendingPathComponent("usage.sqlite").path)

            """)
        let result = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("guidance-server").path,
            ["--config", folder.appendingPathComponent("server.yaml").path])
        #expect(result.status == 78, "\(name): exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("analyzer.apiKeyFile") && result.stderr.contains(says), "\(name): \(result.stderr)")
        #expect(!result.stderr.contains(Self.key), "the error printed the key")
    }
}
