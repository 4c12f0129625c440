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

    /// Found by the `answers` fuzz target (fuzz/regressions/answers, minimised): a hazard whose
    /// 64th character is the space a newline became was kept with that space at its end, and read
    /// back it lost it, so decoding an answer twice did not give the same answer. The same held
    /// for a text cut at 300 characters just after a space.
    @Test func decodingItsOwnResultChangesNothing() throws {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let reply = try String(
            decoding: Data(contentsOf: repo.appendingPathComponent("fuzz/regressions/answers/hazard-cut-before-a-space")),
            as: UTF8.self)
        let answer = try #require(ModelAnswer.decode(reply))
        let hazard = try #require(answer.hazards.first)
        #expect(hazard.count <= 64 && !hazard.hasSuffix(" "), "\(hazard.debugDescription)")
        let again = try #require(ModelAnswer.decode(String(decoding: try JSONEncoder().encode(answer), as: UTF8.self)))
        #expect(again == answer)

        let text = String(repeating: "a", count: GuidanceText.maxCharacters - 1) + " b"
        #expect(GuidanceText.clean(text) == String(repeating: "a", count: GuidanceText.maxCharacters - 1))
    }
}
