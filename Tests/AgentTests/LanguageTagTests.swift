import Agent
import Testing

@Suite struct LanguageTagTests {
    @Test(arguments: [
        ("ko-KR", "ko-KR"), ("ko", "ko"), ("KO-kr", "ko-KR"), ("en-us", "en-US"), ("es-419", "es-419"),
        ("zh-hant-tw", "zh-Hant-TW"), ("sr-Latn-RS", "sr-Latn-RS"), ("zh-yue-HK", "zh-yue-HK"),
        ("yue", "yue"), ("cmn-Latn-pinyin", "cmn-Latn-pinyin"), ("de-CH-1996", "de-CH-1996"),
        ("en-US-u-ca-gregory", "en-US-u-ca-gregory"), ("en-US-x-car", "en-US-x-car")
    ])
    func wellFormedTagsAreKeptInTheirConventionalCase(text: String, canonical: String) {
        #expect(LanguageTag(text)?.description == canonical)
    }

    @Test(arguments: [
        "", "k", "korean", "english", "ko_KR", "ko_KR.UTF-8", "ko-", "-KR", "ko--KR", "ko KR", "C", "POSIX",
        "x-private", "i-klingon", "ko-KR-u", "ko-KR-x", "en-US-toolongsubtag", "ko-KR-ab", "한국어"
    ])
    func anythingElseIsRefused(text: String) {
        #expect(LanguageTag(text) == nil)
    }

    @Test func tagsAreEqualWhateverTheirCase() {
        #expect(LanguageTag("ko-KR") == LanguageTag("KO-kr"))
        #expect(LanguageTag("ko-KR") != LanguageTag("ko-KP"))
    }
}
