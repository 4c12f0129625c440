import GuidanceProtocol
@testable import GuidanceServer
import Testing

/// Text a driver hears and a log shows, from a model or a client: cleaned, capped, escaped.
@Suite struct GuidanceTextTests {
    @Test func controlAndDirectionCharactersGoAndWhiteSpaceIsOneSpace() {
        // A right-to-left override would make a log or a screen show other words than are spoken.
        let text = "  Slow\u{0}down,\n\tpedestrian\u{202E}ahead\u{2066}.\u{7}  "
        #expect(GuidanceText.clean(text) == "Slow down, pedestrianahead.")
        // Joiners stay: some scripts need them (Persian's non-joiner, emoji sequences).
        #expect(GuidanceText.clean("می\u{200C}روید") == "می\u{200C}روید")
        #expect(GuidanceText.clean("\u{202A}\u{200B}\u{FEFF}") == "")
    }

    @Test func cappedInCharactersAndInBytesWhateverTheScript() {
        let latin = String(repeating: "a", count: 5000)
        #expect(GuidanceText.clean(latin).count == GuidanceText.maxCharacters)
        // 300 Hangul syllables are 900 bytes: within both caps.
        let korean = String(repeating: "보", count: 1000)
        #expect(GuidanceText.clean(korean).count == GuidanceText.maxCharacters)
        // Characters of many scalars each: the byte cap cuts first, and never inside a character.
        let family = String(repeating: "👨‍👩‍👧‍👦", count: 200)
        let cleaned = GuidanceText.clean(family)
        #expect(cleaned.utf8.count <= GuidanceText.maxBytes)
        #expect(cleaned.allSatisfy { $0 == "👨‍👩‍👧‍👦" })
        #expect(cleaned.count == GuidanceText.maxBytes / "👨‍👩‍👧‍👦".utf8.count)
    }

    @Test func aPeersStringInALogIsOneQuotedLine() {
        let hostile = "ko-KR\ninfo forged: session x opened\u{202E}"
        let logged = GuidanceText.loggable(hostile)
        #expect(!logged.contains("\n") && !logged.contains("\u{202E}"))
        #expect(logged == #""ko-KR\u{a}info forged: session x opened\u{202e}""#)
        #expect(GuidanceText.loggable(String(repeating: "x", count: 100), limit: 10) == "\"xxxxxxxxxx…\"")
    }

    @Test func aModelsAnswerIsCleanedLikeAnyGuidance() throws {
        let answer = try #require(
            ModelAnswer.decode(#"{"clear":false,"priority":"urgent","text":"Brake\u0000 now\u202e!\n","hazards":["a\u0007b"]}"#))
        #expect(answer.text == "Brake now!")
        #expect(answer.hazards == ["a b"])
        let control = try #require(ModelAnswer.decode(#"{"clear":false,"priority":"normal","text":"\u0001\u202e\n","hazards":[]}"#))
        #expect(control.clear, "nothing left to say is a clear road")
    }
}
