import Foundation
@testable import Agent
import RoadScene
import Testing

private let counts = [0, 1, 2, 7, 43, 600, 12_345]

/// Every phrase, with each count for the phrases that carry one.
private let everyPhrase: [StatusPhrase] = Array(Set(counts.flatMap { StatusPhrase.allCases(minutes: $0) }))

/// The kind of a phrase without its count.
private func kind(_ phrase: StatusPhrase) -> String {
    switch phrase {
    case .ready: "ready"
    case .connected: "connected"
    case .connectionLost: "connectionLost"
    case .cameraLost: "cameraLost"
    case .cameraBack: "cameraBack"
    case .authenticationFailed: "authenticationFailed"
    case .usageLow: "usageLow"
    case .usageExhausted: "usageExhausted"
    case .usageRemaining: "usageRemaining"
    case .usageUnlimited: "usageUnlimited"
    case .guidanceUnavailable: "guidanceUnavailable"
    case .guidanceLocal: "guidanceLocal"
    case .guidanceFromServer: "guidanceFromServer"
    case .noToken: "noToken"
    case .recordingOnly: "recordingOnly"
    case .pairingCode: "pairingCode"
    case .paired: "paired"
    case .incidentSaved: "incidentSaved"
    case .parkingEvents: "parkingEvents"
    }
}

@Suite struct StatusPhraseTests {
    @Test func allCasesHasEveryKindOnce() {
        let kinds = StatusPhrase.allCases(minutes: 5).map(kind)
        #expect(kinds.count == 19)
        #expect(Set(kinds).count == 19)
    }

    /// Local and server-side findings (the vision analyzer's phrase tables) speak the same languages.
    @Test func roadFindingsCoverTheSameLanguages() {
        #expect(RoadFinding.languages == StatusPhrase.languages)
    }

    @Test func theLanguagesAreTheEightWithTexts() {
        #expect(StatusPhrase.languages.sorted() == ["de", "en", "es", "fr", "ja", "ko", "pt", "zh"])
    }

    @Test(arguments: StatusPhrase.languages)
    func everyPhraseHasText(language: String) {
        for phrase in everyPhrase {
            let text = phrase.text(language: language)
            #expect(text.contains { !$0.isWhitespace }, "\(phrase) in \(language)")
        }
    }

    /// A language that fell through to English would pass the test above.
    @Test(arguments: StatusPhrase.languages.filter { $0 != "en" })
    func everyLanguageHasItsOwnTexts(language: String) {
        for phrase in everyPhrase {
            #expect(phrase.text(language: language) != phrase.text(language: "en"), "\(phrase) in \(language)")
        }
    }

    @Test func differentPhrasesHaveDifferentTexts() {
        for language in StatusPhrase.languages {
            let texts = StatusPhrase.allCases(minutes: 7).map { $0.text(language: language) }
            #expect(Set(texts).count == texts.count, "\(language)")
        }
    }

    @Test func unknownLanguagesAndLongerTagsAreAccepted() {
        #expect(StatusPhrase.ready.text(language: "xx") == "Dashcam ready.")
        #expect(StatusPhrase.ready.text(language: "") == "Dashcam ready.")
        #expect(StatusPhrase.ready.text(language: "ko-KR") == StatusPhrase.ready.text(language: "ko"))
        #expect(StatusPhrase.ready.text(language: "ko_KR") == StatusPhrase.ready.text(language: "ko"))
        #expect(StatusPhrase.ready.text(language: "KO") == StatusPhrase.ready.text(language: "ko"))
        #expect(StatusPhrase.ready.text(language: "ko") != "Dashcam ready.")
    }

    @Test func englishTexts() {
        #expect(StatusPhrase.ready.text(language: "en") == "Dashcam ready.")
        #expect(StatusPhrase.usageLow(minutes: 7).text(language: "en") == "Guidance time is running low: 7 minutes left.")
        #expect(StatusPhrase.usageRemaining(minutes: 43).text(language: "en") == "43 minutes of guidance left.")
        #expect(StatusPhrase.usageUnlimited.text(language: "en") == "Unlimited guidance.")
    }

    @Test func englishSingularAndPlural() {
        #expect(StatusPhrase.usageLow(minutes: 1).text(language: "en") == "Guidance time is running low: 1 minute left.")
        #expect(StatusPhrase.usageLow(minutes: 2).text(language: "en") == "Guidance time is running low: 2 minutes left.")
        #expect(StatusPhrase.usageRemaining(minutes: 1).text(language: "en") == "1 minute of guidance left.")
        #expect(StatusPhrase.usageRemaining(minutes: 0).text(language: "en") == "0 minutes of guidance left.")
    }

    /// The voices read a digit 1 as the bare numeral ("eins Minute"), so one minute is a word.
    @Test(arguments: [
        ("de", "Noch eine Minute Fahrhinweise.", "Noch 2 Minuten Fahrhinweise."),
        ("es", "Queda un minuto de asistencia.", "Quedan 2 minutos de asistencia."),
        ("fr", "Il reste une minute d'assistance.", "Il reste 2 minutes d'assistance."),
        ("pt", "Resta um minuto de assistência.", "Restam 2 minutos de assistência.")
    ])
    func singularAndPlural(language: String, one: String, two: String) {
        #expect(StatusPhrase.usageRemaining(minutes: 1).text(language: language) == one)
        #expect(StatusPhrase.usageRemaining(minutes: 2).text(language: language) == two)
    }

    @Test func frenchZeroIsSingular() {
        #expect(StatusPhrase.usageRemaining(minutes: 0).text(language: "fr") == "Il reste 0 minute d'assistance.")
    }

    @Test func koreanAndChineseCounts() {
        #expect(StatusPhrase.usageRemaining(minutes: 43).text(language: "ko") == "안내 시간이 43분 남았습니다.")
        #expect(StatusPhrase.usageRemaining(minutes: 43).text(language: "zh") == "驾驶指引还剩43分钟。")
        #expect(StatusPhrase.usageRemaining(minutes: 2).text(language: "zh") == "驾驶指引还剩两分钟。")
    }

    @Test func negativeCountsAreSpokenAsZero() {
        #expect(StatusPhrase.usageLow(minutes: -3).text(language: "en") == StatusPhrase.usageLow(minutes: 0).text(language: "en"))
        #expect(
            StatusPhrase.usageRemaining(minutes: -1).text(language: "ja") == StatusPhrase.usageRemaining(minutes: 0).text(language: "ja"))
    }

    /// The ja voice reads any kanji as "Chinese letter".
    @Test func japaneseIsKanaOnly() {
        for phrase in everyPhrase {
            let text = phrase.text(language: "ja")
            let ideographs = text.unicodeScalars.filter {
                (0x4E00...0x9FFF).contains($0.value) || (0x3400...0x4DBF).contains($0.value)
                    || (0xF900...0xFAFF).contains($0.value)
            }
            #expect(ideographs.isEmpty, "\(phrase): \(text)")
            #expect(!text.contains { $0.isASCII && $0.isNumber }, "\(phrase): \(text)")
            #expect(text.unicodeScalars.contains { (0x3041...0x30FF).contains($0.value) }, "\(phrase): \(text)")
        }
    }

    /// Nine digits, read one by one in groups of three, twice: letters are confused by ear.
    @Test func pairingCodesAreReadDigitByDigitTwice() {
        #expect(
            StatusPhrase.pairingCode("012345678").text(language: "en")
                == "To pair this car, enter the code 0 1 2, 3 4 5, 6 7 8. Again: 0 1 2, 3 4 5, 6 7 8.")
        #expect(
            StatusPhrase.pairingCode("012345678").text(language: "ja")
                == "この くるまを つなぐには、コード ぜろ いち に、さん よん ご、ろく なな はち を にゅうりょく して ください。もう いちど、ぜろ いち に、さん よん ご、ろく なな はち。")
        for language in StatusPhrase.languages {
            let text = StatusPhrase.pairingCode("987654321").text(language: language)
            #expect(text.components(separatedBy: language == "ja" ? "きゅう はち なな" : "9 8 7").count == 3, "\(language): \(text)")
        }
        #expect(StatusPhrase.paired(owner: "Ana").text(language: "en") == "Paired with the account of Ana.")
        #expect(StatusPhrase.incidentSaved.text(language: "en") == "Incident saved.")
    }

    @Test func japaneseTexts() {
        #expect(StatusPhrase.usageRemaining(minutes: 43).text(language: "ja") == "ガイダンスが あと よんじゅうさんぷん つかえます。")
        #expect(StatusPhrase.usageLow(minutes: 7).text(language: "ja").hasSuffix("あと ななふんです。"))
    }

    @Test(arguments: [
        (0, "ぜろふん"), (1, "いっぷん"), (2, "にふん"), (3, "さんぷん"), (4, "よんぷん"), (5, "ごふん"),
        (6, "ろっぷん"), (7, "ななふん"), (8, "はっぷん"), (9, "きゅうふん"), (10, "じゅっぷん"),
        (11, "じゅういっぷん"), (20, "にじゅっぷん"), (43, "よんじゅうさんぷん"), (59, "ごじゅうきゅうふん"),
        (100, "ひゃっぷん"), (300, "さんびゃっぷん"), (600, "ろっぴゃっぷん"), (800, "はっぴゃっぷん"),
        (1000, "せんぷん"), (3000, "さんぜんぷん"), (10_000, "いちまんぷん"),
        (12_345, "いちまんにせんさんびゃくよんじゅうごふん"), (20_006, "にまんろっぷん")
    ])
    func japaneseMinutes(minutes: Int, kana: String) {
        #expect(Phrasebook.Japanese.minutes(minutes) == kana)
    }

    @Test(arguments: [
        (1, "いっけん"), (2, "にけん"), (3, "さんけん"), (6, "ろっけん"), (8, "はっけん"), (10, "じゅっけん"),
        (11, "じゅういっけん"), (100, "ひゃっけん"), (1000, "せんけん")
    ])
    func japaneseEvents(count: Int, kana: String) {
        #expect(Phrasebook.Japanese.events(count) == kana)
        #expect(StatusPhrase.parkingEvents(count).text(language: "ja").contains(kana))
    }
}
