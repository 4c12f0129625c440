import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Logging
import NIOHTTP1
import TestSupport
import Testing

extension SampleSegment {
    static func received(seq: Int = 7, locale: String = "ko-KR") async -> ReceivedSegment {
        let data = await data()
        return ReceivedSegment(
            device: "car-1", stream: "stream-a", locale: locale,
            header: .init(
                seq: seq, capturedAt: "2026-11-24T08:00:00.000Z", durationMs: 2000, frames: 20, bytes: data.count,
                sha256: String(repeating: "a", count: 64), chunks: 1),
            data: data)
    }
}

/// The `gemini` and `openai` analyzers against loopback stand-ins of their services: the exact
/// request each one sends, and what it does with each documented reply.
@Suite(.serialized) struct HostedModelTests {
    static let answer = GeminiReplies.sampleAnswer
    static let fastRules: HostedModelAnalyzer.StateMachine.Settings = {
        var rules = HostedModelAnalyzer.StateMachine.Settings()
        rules.backoff = .milliseconds(20)
        rules.openFor = .seconds(60)
        return rules
    }()

    func gemini(_ url: String, ledger: (any UsageLedger)? = nil, timeout: Duration = .seconds(30)) -> HostedModelAnalyzer {
        HostedModelAnalyzer(
            endpoint: GeminiEndpoint(endpoint: "\(url)/v1beta", model: "gemini-2.5-flash", apiKey: "test-key-123", transcode: nil),
            timeout: timeout, rules: Self.fastRules, ledger: ledger, logger: Logger(label: "gemini-test"))
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func geminiRequestCarriesTheClipThePromptAndTheSchemaAndTheAnswerBecomesGuidance() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.answer(Self.answer)])
        let ledger = SQLiteLedger(path: ":memory:", logger: Logger(label: "ledger"))
        try await standIn.serve { url in
            let guidance = try await gemini(url, ledger: ledger).analyze(await SampleSegment.received())
            #expect(guidance == .init(seq: 7, text: "보행자가 있습니다. 속도를 줄이세요.", lang: "ko-KR", clear: false, priority: .urgent))
        }
        let request = try #require(standIn.requests.first)
        #expect(standIn.requests.count == 1)
        #expect(request.method == "POST")
        #expect(request.path == "/v1beta/models/gemini-2.5-flash:generateContent")
        #expect(request.headers["x-goog-api-key"] == "test-key-123")
        #expect(request.headers["content-type"] == "application/json")
        #expect(!request.path.contains("test-key-123"))
        let json = request.json
        let contents = try #require(json["contents"] as? [[String: Any]])
        let parts = try #require(contents.first?["parts"] as? [[String: Any]])
        let inline = try #require(parts.first?["inline_data"] as? [String: Any])
        #expect(inline["mime_type"] as? String == "video/mp4")
        #expect(Data(base64Encoded: inline["data"] as? String ?? "") == (await SampleSegment.data()))
        let prompt = try #require(parts.last?["text"] as? String)
        #expect(prompt.contains("ko-KR"))
        let config = try #require(json["generationConfig"] as? [String: Any])
        #expect(config["responseMimeType"] as? String == "application/json")
        let schema = try #require(config["responseSchema"] as? [String: Any])
        #expect(schema["type"] as? String == "OBJECT")
        #expect(Set(schema["required"] as? [String] ?? []) == ["clear", "priority", "text", "hazards"])
        let properties = try #require(schema["properties"] as? [String: [String: Any]])
        #expect(properties["priority"]?["enum"] as? [String] == ["normal", "urgent"])
        #expect(properties["hazards"]?["type"] as? String == "ARRAY")
        #expect((config["thinkingConfig"] as? [String: Any])?["thinkingBudget"] as? Int == 0)
        // The tokens of usageMetadata are in the ledger, under the device.
        let balance = try await ledger.balance(device: "car-1")
        #expect(balance.inputTokens == 1290 && balance.outputTokens == 31)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aClearAnswerIsAClearRoad() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.answer(#"{"clear": true, "priority": "normal", "text": "", "hazards": []}"#)])
        try await standIn.serve { url in
            let guidance = try await gemini(url).analyze(await SampleSegment.received())
            #expect(guidance?.clear == true && guidance?.text == "")
        }
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func rateLimitedIsTriedAgainAfterTheDelayTheServiceAsks() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.rateLimited(retryDelay: "0.3s"), GeminiReplies.answer(Self.answer)])
        try await standIn.serve { url in
            let analyzer = gemini(url)
            let guidance = try await analyzer.analyze(await SampleSegment.received())
            #expect(guidance?.priority == .urgent)
            #expect(analyzer.breaker == .closed(failures: 0))
        }
        #expect(standIn.requests.count == 2)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"), arguments: [500, 503, 504])
    func serverErrorsAreTriedAgainThenGivenUp(status: Int) async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.error(status, "UNAVAILABLE")])
        try await standIn.serve { url in
            let analyzer = gemini(url)
            await #expect(throws: ModelCallError.failed(service: "gemini", .status(status, retryAfter: nil))) {
                try await analyzer.analyze(await SampleSegment.received())
            }
            #expect(analyzer.breaker == .closed(failures: 1))
        }
        #expect(standIn.requests.count == HostedModelAnalyzer.StateMachine.Settings().maxAttempts)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"), arguments: [400, 403, 404])
    func otherClientErrorsAreNeverTriedAgainAndDoNotTripTheBreaker(status: Int) async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.error(status, "INVALID_ARGUMENT")])
        try await standIn.serve { url in
            let analyzer = gemini(url)
            await #expect(throws: ModelCallError.failed(service: "gemini", .status(status, retryAfter: nil))) {
                try await analyzer.analyze(await SampleSegment.received())
            }
            #expect(analyzer.breaker == .closed(failures: 0))
        }
        #expect(standIn.requests.count == 1)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func malformedAnswersGiveNoGuidanceAndAreNotTriedAgain() async throws {
        let replies: [ModelStandIn.Reply] = [
            .json(status: 200, body: "{not json"),
            .json(status: 200, body: #"{"candidates": []}"#),
            GeminiReplies.answer("the road looks fine"),
            GeminiReplies.answer(#"{"clear": false, "priority": "panic", "text": "x", "hazards": []}"#)
        ]
        let standIn = ModelStandIn(replies: replies)
        try await standIn.serve { url in
            let analyzer = gemini(url)
            for _ in replies {
                await #expect(throws: ModelCallError.failed(service: "gemini", .malformed)) {
                    try await analyzer.analyze(await SampleSegment.received())
                }
            }
            #expect(analyzer.breaker == .closed(failures: 0))
        }
        #expect(standIn.requests.count == replies.count)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aServiceThatNeverAnswersIsGivenUpAtTheDeadline() async throws {
        let standIn = ModelStandIn(replies: [.silence])
        try await standIn.serve { url in
            let analyzer = gemini(url, timeout: .milliseconds(600))
            await #expect(throws: ModelCallError.failed(service: "gemini", .transport)) {
                try await analyzer.analyze(await SampleSegment.received())
            }
        }
        #expect(standIn.requests.count >= 1)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aServiceThatIsDownIsNotCalledUntilTheBreakerLetsAProbeThrough() async throws {
        let standIn = ModelStandIn(replies: [GeminiReplies.error(503, "UNAVAILABLE")])
        try await standIn.serve { url in
            let analyzer = gemini(url)
            let failures = HostedModelAnalyzer.StateMachine.Settings().failuresToOpen
            for segment in 0..<failures {
                do {
                    _ = try await analyzer.analyze(await SampleSegment.received(seq: segment))
                    Issue.record("segment \(segment) got an answer from a service that is down")
                } catch let error as ModelCallError {
                    // The segment that opens the breaker already says "unavailable".
                    #expect(
                        error
                            == (segment == failures - 1
                                ? .unavailable(service: "gemini") : .failed(service: "gemini", .status(503, retryAfter: nil))))
                }
            }
            let calls = standIn.requests.count
            #expect(calls == failures * HostedModelAnalyzer.StateMachine.Settings().maxAttempts)
            for segment in failures..<(failures + 5) {
                await #expect(throws: ModelCallError.unavailable(service: "gemini")) {
                    try await analyzer.analyze(await SampleSegment.received(seq: segment))
                }
            }
            #expect(standIn.requests.count == calls, "an open breaker calls nobody")
        }
    }

    // MARK: - OpenAI-compatible

    static func chatCompletion(_ content: String) -> ModelStandIn.Reply {
        let text = String(data: try! JSONSerialization.data(withJSONObject: [content]), encoding: .utf8)!.dropFirst().dropLast()
        return .json(
            status: 200,
            body: """
                {"id": "chatcmpl-stand-in", "object": "chat.completion", "created": 1764000000, "model": "qwen2.5-vl",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": \(text)}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 812, "completion_tokens": 25, "total_tokens": 837}}
                """)
    }

    func openai(_ url: String, key: String?, keyframes: Int = 3) -> HostedModelAnalyzer {
        HostedModelAnalyzer(
            endpoint: OpenAIChatEndpoint(
                endpoint: "\(url)/v1", model: "qwen2.5-vl", apiKey: key,
                keyframes: { try await SegmentVideo.keyframeJPEGs(from: $0, count: keyframes) }),
            // Long enough for the keyframes on a machine busy with every other test.
            timeout: .seconds(30), rules: Self.fastRules, ledger: nil, logger: Logger(label: "openai-test"))
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"), arguments: [2, 4])
    func openAIRequestCarriesKeyframesAsJPEGDataURIsAndTheSchema(keyframes: Int) async throws {
        let standIn = ModelStandIn(replies: [Self.chatCompletion(Self.answer)])
        try await standIn.serve { url in
            let guidance = try await openai(url, key: "local-key", keyframes: keyframes).analyze(
                await SampleSegment.received(locale: "de-DE"))
            #expect(guidance?.priority == .urgent && guidance?.lang == "de-DE")
        }
        let request = try #require(standIn.requests.first)
        #expect(request.path == "/v1/chat/completions")
        #expect(request.headers["authorization"] == "Bearer local-key")
        let json = request.json
        #expect(json["model"] as? String == "qwen2.5-vl")
        let message = try #require((json["messages"] as? [[String: Any]])?.first)
        #expect(message["role"] as? String == "user")
        let content = try #require(message["content"] as? [[String: Any]])
        #expect((content.first?["text"] as? String)?.contains("de-DE") == true)
        let images = content.compactMap { ($0["image_url"] as? [String: Any])?["url"] as? String }
        #expect(images.count == keyframes)
        for uri in images {
            #expect(uri.hasPrefix("data:image/jpeg;base64,"))
            let jpeg = try #require(Data(base64Encoded: String(uri.dropFirst("data:image/jpeg;base64,".count))))
            #expect(jpeg.prefix(2) == Data([0xFF, 0xD8]))
        }
        let format = try #require(json["response_format"] as? [String: Any])
        #expect(format["type"] as? String == "json_schema")
        let schema = try #require((format["json_schema"] as? [String: Any])?["schema"] as? [String: Any])
        #expect(schema["type"] as? String == "object" && schema["additionalProperties"] as? Bool == false)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func openAIWithoutAKeySendsNoAuthorizationAndHonoursRetryAfter() async throws {
        let standIn = ModelStandIn(replies: [
            .json(
                status: 429, body: #"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#,
                headers: ["Retry-After": "1"]),
            Self.chatCompletion(#"{"clear": true, "priority": "normal", "text": "", "hazards": []}"#)
        ])
        try await standIn.serve { url in
            let guidance = try await openai(url, key: nil).analyze(await SampleSegment.received())
            #expect(guidance?.clear == true)
        }
        #expect(standIn.requests.count == 2)
        #expect(standIn.requests.allSatisfy { $0.headers["authorization"] == nil })
        #expect(HostedModelAnalyzer.retryAfter(["Retry-After": "1"]) == .seconds(1))
        #expect(HostedModelAnalyzer.retryAfter(["Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"]) == nil)
        #expect(HostedModelAnalyzer.retryAfter(["Retry-After": "-5"]) == nil)
    }
}
