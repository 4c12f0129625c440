import Foundation
import GuidanceProtocol
import GuidanceServer
import Testing

/// What a model's answer becomes before it reaches the driver.
@Suite struct ModelAnswerTests {
    static func answer(text: String) throws -> String {
        let object: [String: Any] = ["clear": false, "priority": "urgent", "text": text, "hazards": ["pedestrian"]]
        return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    /// A reply that broke the `answers` fuzz target's promise that a guidance message fits in one
    /// protocol message, when the text was cut in characters only: one letter with 40,000
    /// combining marks is a single character of 80 KB, and the agent closes the connection on a
    /// message over 64 KiB. Cut in bytes too, nothing of it is left: a clear road.
    @Test func oneCharacterOfThousandsOfCombiningMarksFitsInOneMessage() throws {
        let text = "a" + String(repeating: "\u{301}", count: 40_000)
        #expect(text.count == 1)
        let answer = try #require(ModelAnswer.decode(try Self.answer(text: text)))
        #expect(answer.text.utf8.count <= GuidanceText.maxBytes)
        let message = ServerMessage.guidance(answer.guidance(seq: 1, locale: "ko-KR")).encoded()
        #expect(message.utf8.count <= GuidanceProtocol.maxMessageBytes)
    }
}
