import Foundation
import GuidanceProtocol
import GuidanceServer
import NIOHTTP1

/// What a hosted model's service sends back, read the ways the server reads it: the input is a
/// response body, taken as the answer's own JSON (``ModelAnswer/decode(_:)``), as a Gemini
/// `generateContent` response and error, and as an OpenAI chat completion; its first line is also
/// the `Retry-After` header beside it.
enum Answers {
    static let gemini = GeminiEndpoint(
        endpoint: "https://generativelanguage.googleapis.com/v1beta", model: "gemini-2.5-flash",
        apiKey: "key", transcode: nil)
    static let openAI = OpenAIChatEndpoint(endpoint: "http://127.0.0.1:8080/v1", model: "model", apiKey: nil, keyframes: { _ in [] })

    static func run(_ input: UnsafeRawBufferPointer) {
        let body = Data(input)
        let text = String(decoding: input, as: UTF8.self)
        if let answer = ModelAnswer.decode(text) { check(answer) }

        for (answer, usage) in [gemini.parse(body), openAI.parse(body)] {
            if let answer { check(answer) }
            if let usage {
                // Each count is below 2^31; Gemini's output adds two of them.
                require((0..<(1 << 31)).contains(usage.input) && (0..<(1 << 32)).contains(usage.output), "tokens \(usage)")
            }
        }

        var headers = HTTPHeaders()
        headers.add(name: "retry-after", value: String(text.prefix { $0 != "\n" && $0 != "\r" }.prefix(200)))
        for delay in [gemini.retryDelay(headers: headers, body: body), openAI.retryDelay(headers: headers, body: body)] {
            if let delay { require(delay >= .zero && delay <= .seconds(86_400), "a retry delay of \(delay)") }
        }
    }

    static func check(_ answer: ModelAnswer) {
        require(
            answer.text.count <= ModelAnswer.maxTextCharacters && answer.text.utf8.count <= GuidanceText.maxBytes,
            "text of \(answer.text.count) characters, \(answer.text.utf8.count) bytes")
        require(answer.hazards.count <= 16 && answer.hazards.allSatisfy { $0.count <= 64 }, "hazards \(answer.hazards)")
        require(!answer.text.isEmpty || answer.clear, "a warning with no text")
        // GuidanceText.clean's promises: white space is single spaces, never first; no control
        // characters; no format characters (direction overrides, invisible ones) but the joiners.
        for text in [answer.text] + answer.hazards {
            require(!text.hasPrefix(" ") && !text.hasSuffix(" ") && !text.contains("  "), "spaces in \(text.debugDescription)")
            for scalar in text.unicodeScalars {
                let category = scalar.properties.generalCategory
                require(!scalar.properties.isWhitespace || scalar == " ", "white space U+\(String(scalar.value, radix: 16)) kept")
                require(
                    category != .control && (category != .format || scalar == "\u{200C}" || scalar == "\u{200D}"),
                    "U+\(String(scalar.value, radix: 16)) (\(category)) kept")
            }
        }
        let guidance = answer.guidance(seq: 7, locale: "ko-KR")
        require(
            guidance.clear == answer.clear && (!guidance.clear || (guidance.text.isEmpty && guidance.priority == .normal)),
            "guidance \(guidance) of \(answer)")
        // It reaches the agent in one message: an agent closes the connection on a bigger one.
        let message = ServerMessage.guidance(guidance).encoded()
        require(
            message.utf8.count <= GuidanceProtocol.maxMessageBytes,
            "a guidance message of \(message.utf8.count) bytes (\(answer.text.count) characters), over \(GuidanceProtocol.maxMessageBytes)")
        // Written out and read again (as a stand-in model would answer), it is the same answer:
        // what decoding makes of an answer, it makes of its own result unchanged.
        let again = (try? JSONEncoder().encode(answer)).flatMap { ModelAnswer.decode(String(decoding: $0, as: UTF8.self)) }
        require(again == answer, "\(answer) read back as \(String(describing: again))")
    }
}
