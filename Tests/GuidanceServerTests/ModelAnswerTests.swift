import Foundation
import GuidanceProtocol
import GuidanceServer
import Testing

/// What a model's answer becomes before it reaches the driver: its text cut to what a speaker
/// should say and one protocol message can carry.
@Suite struct ModelAnswerTests {
    static func answer(text: String) throws -> String {
        let object: [String: Any] = ["clear": false, "priority": "urgent", "text": text, "hazards": ["pedestrian"]]
        return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    @Test func aLongAnswerIsCutTo300Characters() throws {
        let answer = try #require(ModelAnswer.decode(try Self.answer(text: "  " + String(repeating: "보행자 ", count: 200))))
        #expect(answer.text.count == ModelAnswer.maxTextCharacters)
        #expect(answer.text.hasPrefix("보행자"))
        #expect(!answer.clear && answer.priority == .urgent && answer.hazards == ["pedestrian"])
    }

    /// A reply that broke the `answers` fuzz target's promise that a guidance message fits in one
    /// protocol message: one letter with 40,000 combining marks is a single character, so the
    /// 300-character cut kept all 80 KB, and the agent would have closed the connection on the
    /// guidance that carried it.
    @Test func oneCharacterWithThousandsOfCombiningMarksIsCutInBytes() throws {
        let text = "a" + String(repeating: "\u{301}", count: 40_000)
        #expect(text.count == 1)
        let answer = try #require(ModelAnswer.decode(try Self.answer(text: text)))
        #expect(answer.text.utf8.count <= ModelAnswer.maxTextBytes)
        // Cut between scalars: the letter and as many of its marks as fit.
        #expect(answer.text.unicodeScalars.first == "a" && answer.text.unicodeScalars.dropFirst().allSatisfy { $0 == "\u{301}" })
        #expect(answer.text.utf8.count > ModelAnswer.maxTextBytes - 2)
        #expect(!answer.clear)
        let message = ServerMessage.guidance(answer.guidance(seq: 1, locale: "ko-KR")).encoded()
        #expect(message.utf8.count <= GuidanceProtocol.maxMessageBytes)
    }

    @Test func threeHundredCharactersOfAnyScriptKeepEveryCharacter() throws {
        // Hangul, CJK and emoji with modifiers: 300 characters, under the byte limit, kept whole.
        for piece in ["보", "漢", "👍🏽", "e\u{301}"] {
            let text = String(repeating: piece, count: ModelAnswer.maxTextCharacters)
            let answer = try #require(ModelAnswer.decode(try Self.answer(text: text)))
            #expect(answer.text == text, "\(piece)")
        }
    }
}
