public import Foundation

/// An OpenAI-compatible `POST /v1/chat/completions`, as self-hosted model servers offer it
/// (llama.cpp's `llama-server`, Ollama, vLLM): a few keyframes of the segment as JPEG `image_url`
/// data URIs, and the answer held to ``ModelAnswer``'s schema through `response_format`. The shapes
/// follow the public references:
///
/// - https://platform.openai.com/docs/api-reference/chat/create (messages, `image_url` parts,
///   `response_format` with `json_schema`, `usage`)
/// - https://platform.openai.com/docs/guides/structured-outputs
/// - https://platform.openai.com/docs/guides/rate-limits (429 and `Retry-After`)
/// - https://github.com/ggml-org/llama.cpp/tree/master/tools/server (the same endpoint, served locally)
public enum OpenAIChatAPI {
    /// `POST {endpoint}/chat/completions`, where the endpoint ends in `/v1`.
    public static func url(endpoint: String) -> String {
        modelURL(endpoint: endpoint, path: "chat/completions")
    }

    /// The request body: the prompt and the keyframes (JPEG) as one user message.
    public static func requestBody(model: String, jpegs: [Data], locale: String, motion: ModelAnswer.Motion? = nil) throws -> Data {
        var content: [[String: Any]] = [
            [
                "type": "text",
                "text": ModelAnswer.prompt(locale: locale, motion: motion)
                    + " The images are frames from the clip, oldest first."
            ]
        ]
        for jpeg in jpegs {
            content.append(["type": "image_url", "image_url": ["url": "data:image/jpeg;base64,\(jpeg.base64EncodedString())"]])
        }
        let body: [String: Any] = [
            "model": model,
            "messages": [["role": "user", "content": content] as [String: Any]],
            "response_format": [
                "type": "json_schema",
                "json_schema": ["name": "driver_guidance", "strict": true, "schema": ModelAnswer.schema(openAPI: false)] as [String: Any]
            ] as [String: Any],
            "temperature": 0.2,
            "max_tokens": 256
        ]
        return try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// What a 200 carried: the first choice's message content as the answer, and `usage`.
    public static func parse(_ body: Data) -> (answer: ModelAnswer?, usage: ModelTokens?) {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return (nil, nil) }
        var usage: ModelTokens?
        if let counts = object["usage"] as? [String: Any] {
            usage = ModelTokens(input: ModelTokens.count(counts["prompt_tokens"]), output: ModelTokens.count(counts["completion_tokens"]))
        }
        guard let choices = object["choices"] as? [[String: Any]], let message = choices.first?["message"] as? [String: Any],
            let text = message["content"] as? String
        else {
            return (nil, usage)
        }
        return (ModelAnswer.decode(text), usage)
    }
}
