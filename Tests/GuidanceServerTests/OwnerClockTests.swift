import Foundation
@testable import GuidanceServer
import Testing

/// Times on the owner's pages: in their zone, written as their language writes dates; the
/// language from their setting, else the browser's first one the cars speak.
@Suite struct OwnerClockTests {
    @Test(
        arguments: [
            ("ko-KR,ko;q=0.9,en-US;q=0.8", "ko"), ("fr-CH, fr;q=0.9, en;q=0.8", "fr"), ("xx, ja;q=0.5", "ja"),
            ("en;q=0.1, de;q=0.9", "de"), ("pt-BR", "pt"), ("ko;q=0, es", "es"), ("", nil), ("tlh", nil)
        ] as [(String, String?)])
    func theBrowsersFirstLanguageTheCarsSpeak(header: String, expected: String?) {
        #expect(PageText.language(acceptLanguage: header) == expected)
    }

    @Test func aTimeIsWrittenInTheOwnersZoneAndLanguage() throws {
        let ms: Int64 = 1_795_986_000_000  // 2026-11-29 21:00 UTC
        let seoul = OwnerClock(timeZone: TimeZone(identifier: "Asia/Seoul"), language: "ko").text(ms)
        #expect(seoul.contains("2026년 11월 30일") && seoul.contains("6:00"), "\(seoul)")
        let tokyo = OwnerClock(timeZone: TimeZone(identifier: "Asia/Tokyo"), language: "ja").text(ms)
        #expect(tokyo.contains("2026年11月30日") && tokyo.contains("6:00"), "\(tokyo)")
        let utc = OwnerClock(timeZone: nil, language: nil).text(ms)
        #expect(utc.contains("Nov 29, 2026") && utc.contains("9:00"), "\(utc)")
    }
}
