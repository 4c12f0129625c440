public import Foundation

/// The Gemini API's `generateContent`, as far as this server uses it: one request per segment with
/// the clip inline, and the structured answer read back. The shapes follow the public reference:
///
/// - request and response: https://ai.google.dev/api/generate-content
/// - `inline_data` video: https://ai.google.dev/gemini-api/docs/video-understanding
/// - `responseMimeType` / `responseSchema`: https://ai.google.dev/gemini-api/docs/structured-output
/// - `thinkingConfig.thinkingBudget`: https://ai.google.dev/gemini-api/docs/thinking
/// - errors and `google.rpc.RetryInfo`: https://ai.google.dev/gemini-api/docs/troubleshooting
///   and https://ai.google.dev/gemini-api/docs/rate-limits
///
/// The key goes in the `x-goog-api-key` header, never in the URL (so it is not in any log).
public enum GeminiAPI {
    /// `POST {endpoint}/models/{model}:generateContent`.
    public static func url(endpoint: String, model: String) -> String {
        modelURL(endpoint: endpoint, path: "models/\(model):generateContent")
    }

    /// The request body: the clip as `inline_data` (base64), then the prompt; JSON output held to
    /// ``ModelAnswer``'s schema; thinking off (`thinkingBudget` 0), since the answer is needed
    /// within seconds.
    public static func requestBody(video: Data, mimeType: String, locale: String, motion: ModelAnswer.Motion? = nil) throws -> Data {
        let body: [String: Any] = [
            "contents": [
                [
                    "role": "user",
                    "parts": [
                        ["inline_data": ["mime_type": mimeType, "data": video.base64EncodedString()]],
                        ["text": ModelAnswer.prompt(locale: locale, motion: motion)]
                    ] as [Any]
                ] as [String: Any]
            ],
            "generationConfig": [
                "responseMimeType": "application/json",
                "responseSchema": ModelAnswer.schema(openAPI: true),
                "thinkingConfig": ["thinkingBudget": 0],
                "temperature": 0.2,
                "maxOutputTokens": 256
            ] as [String: Any]
        ]
        return try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// What a 200 carried: the answer (nil when the body is not a candidate with the schema's
    /// JSON) and the token counts of `usageMetadata`.
    public static func parse(_ body: Data) -> (answer: ModelAnswer?, usage: ModelTokens?) {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return (nil, nil) }
        var usage: ModelTokens?
        if let metadata = object["usageMetadata"] as? [String: Any] {
            usage = ModelTokens(
                input: ModelTokens.count(metadata["promptTokenCount"]),
                output: ModelTokens.count(metadata["candidatesTokenCount"]) + ModelTokens.count(metadata["thoughtsTokenCount"]))
        }
        guard let candidates = object["candidates"] as? [[String: Any]], let first = candidates.first,
            let content = first["content"] as? [String: Any], let parts = content["parts"] as? [[String: Any]]
        else {
            return (nil, usage)
        }
        // Thought summaries, if a model sends any, are not the answer.
        let text = parts.filter { ($0["thought"] as? Bool) != true }.compactMap { $0["text"] as? String }.joined()
        return (ModelAnswer.decode(text), usage)
    }

    /// The delay an error body asks for: `error.details[]` of type `google.rpc.RetryInfo`, whose
    /// `retryDelay` is a protobuf Duration in JSON ("37s", "1.500s").
    public static func retryDelay(errorBody: Data) -> Duration? {
        guard let object = try? JSONSerialization.jsonObject(with: errorBody) as? [String: Any],
            let error = object["error"] as? [String: Any], let details = error["details"] as? [[String: Any]]
        else { return nil }
        for detail in details where (detail["@type"] as? String)?.hasSuffix("google.rpc.RetryInfo") == true {
            if let delay = detail["retryDelay"] as? String { return protobufDuration(delay) }
        }
        return nil
    }

    /// "37s", "0.5s", "1.000340012s" → a Duration; nil for anything else or out of range.
    static func protobufDuration(_ text: String) -> Duration? {
        guard text.hasSuffix("s"), let seconds = Double(text.dropLast()), seconds.isFinite, seconds >= 0, seconds <= 86_400 else {
            return nil
        }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }
}

/// Tokens a model spent on one segment, as its service reports them.
public struct ModelTokens: Sendable, Equatable {
    public var input: Int
    public var output: Int

    /// A token count from a service's JSON: a non-negative integer below 2^31, else 0.
    static func count(_ value: Any?) -> Int {
        guard let number = value as? NSNumber else { return 0 }
        let double = number.doubleValue
        guard double.isFinite, double >= 0, double < Double(Int32.max) else { return 0 }
        return Int(double)
    }
}
