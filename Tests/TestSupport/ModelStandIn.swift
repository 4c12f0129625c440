public import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOFoundationCompat
import Synchronization

/// A loopback stand-in for a hosted model's HTTP API (Gemini's `generateContent`, an
/// OpenAI-compatible `chat/completions`): it records every request as it arrived and answers with
/// the replies it is given, in order (the last one repeats). Written from the public references
/// named in docs/analyzers.md; the replies are the shapes those pages document.
public final class ModelStandIn: Sendable {
    public struct Recorded: Sendable {
        public var method: String
        public var path: String
        public var headers: [String: String]
        public var body: Data

        public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:] }
    }

    public enum Reply: Sendable {
        case json(status: Int, body: String, headers: [String: String] = [:])
        /// Reads the request, then says nothing until the client gives up.
        case silence
    }

    private let state: Mutex<(requests: [Recorded], replies: [Reply])>

    public init(replies: [Reply]) {
        state = Mutex(([], replies))
    }

    public var requests: [Recorded] { state.withLock { $0.requests } }

    public func answer(with replies: [Reply]) { state.withLock { $0.replies = replies } }

    private func next(_ recorded: Recorded) -> Reply {
        state.withLock { state in
            state.requests.append(recorded)
            return state.replies.count > 1 ? state.replies.removeFirst() : state.replies.first ?? .json(status: 500, body: "{}")
        }
    }

    /// Serves on a free loopback port while `body` runs; `body` gets the base URL.
    public func serve(_ body: @Sendable (String) async throws -> Void) async throws {
        let port = Mutex(0)
        let responder = CallbackResponder { [self] (request: Request, _: BasicRequestContext) async throws -> Response in
            let data = try await request.body.collect(upTo: 64 << 20)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            switch next(Recorded(method: request.method.rawValue, path: request.uri.path, headers: headers, body: Data(buffer: data))) {
            case .json(let status, let text, let extra):
                var fields = HTTPFields()
                fields[.contentType] = "application/json"
                for (name, value) in extra { if let name = HTTPField.Name(name) { fields[name] = value } }
                return Response(status: .init(code: status), headers: fields, body: .init(byteBuffer: ByteBuffer(string: text)))
            case .silence:
                try await Task.sleep(for: .seconds(30))
                return Response(status: .noContent)
            }
        }
        let app = Application(
            responder: responder, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port ?? 0 } })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.run() }
            while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
            try await body("http://127.0.0.1:\(port.withLock { $0 })")
            group.cancelAll()
        }
    }
}

/// Replies as the Gemini API reference documents them.
public enum GeminiReplies {
    /// An answer in the shape the analyzers' schema asks for: an urgent pedestrian, in Korean.
    public static let sampleAnswer = #"{"clear": false, "priority": "urgent", "text": "보행자가 있습니다. 속도를 줄이세요.", "hazards": ["pedestrian"]}"#

    /// A 200 whose candidate's text is `answer` (the JSON the schema asks for), with usage metadata.
    public static func answer(_ answer: String, promptTokens: Int = 1290, outputTokens: Int = 31) -> ModelStandIn.Reply {
        let text = String(data: try! JSONSerialization.data(withJSONObject: [answer], options: .withoutEscapingSlashes), encoding: .utf8)!
            .dropFirst().dropLast()
        return .json(
            status: 200,
            body: """
                {"candidates": [{"content": {"parts": [{"text": \(text)}], "role": "model"}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": \(promptTokens), "candidatesTokenCount": \(outputTokens), "totalTokenCount": \(promptTokens + outputTokens)},
                 "modelVersion": "gemini-2.5-flash", "responseId": "stand-in"}
                """)
    }

    /// 429 RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo` delay.
    public static func rateLimited(retryDelay: String) -> ModelStandIn.Reply {
        .json(
            status: 429,
            body: """
                {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED",
                  "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "\(retryDelay)"}]}}
                """)
    }

    public static func error(_ code: Int, _ status: String) -> ModelStandIn.Reply {
        .json(status: code, body: #"{"error": {"code": \#(code), "message": "stand-in \#(status)", "status": "\#(status)"}}"#)
    }
}
