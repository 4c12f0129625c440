@testable import Agent
import Testing

/// Identifiers from `espeak_ListVoices(NULL)` of eSpeak-ng 1.51, the voices these tests need.
private let identifiers = [
    "gmw/en", "gmw/en-US", "gmw/de", "roa/es", "roa/es-419", "roa/fr", "roa/fr-BE", "roa/it",
    "roa/pt", "roa/pt-BR", "ko", "jpx/ja", "sit/cmn", "sit/cmn-Latn-pinyin", "sit/yue"
]

private let espeak = VoiceMap(available: VoiceMap.voiceNames(identifiers: identifiers))

@Suite struct VoiceMapTests {
    @Test func voiceNamesAreLowercasedFileNames() {
        let names = VoiceMap.voiceNames(identifiers: identifiers)
        #expect(names.count == identifiers.count)
        #expect(names.isSuperset(of: ["en", "en-us", "pt-br", "ko", "ja", "cmn", "cmn-latn-pinyin"]))
        #expect(!names.contains("gmw/en-us"))
        #expect(!names.contains("cmn-Latn-pinyin"))
    }

    @Test func availableNamesAreLowercased() {
        let map = VoiceMap(available: ["PT-BR", "En"])
        #expect(map.available == ["pt-br", "en"])
        #expect(map.voice(for: "pt-BR").voice == "pt-br")
    }

    @Test(arguments: [
        ("pt-BR", "pt-br", "pt"), ("pt_BR", "pt-br", "pt"), ("pt-PT", "pt", "pt"), ("pt", "pt", "pt"),
        ("ko-KR", "ko", "ko"), ("ko", "ko", "ko"), ("ja-JP", "ja", "ja"),
        ("en-US", "en-us", "en"), ("EN-us", "en-us", "en"), ("en-GB", "en", "en"), ("en-AU", "en", "en"),
        ("en-US-u-ca-gregory", "en-us", "en"),
        ("de-DE", "de", "de"), ("de-AT", "de", "de"), ("fr-FR", "fr", "fr"), ("fr-CA", "fr", "fr"),
        ("fr-BE", "fr-be", "fr"), ("es-ES", "es", "es"), ("es-MX", "es-419", "es"), ("es-419", "es-419", "es"),
        ("it-IT", "it", "it")
    ])
    func languages(tag: String, voice: String, language: String) {
        #expect(espeak.voice(for: tag) == VoiceMap.Choice(voice: voice, language: language, fellBack: false))
    }

    @Test func brazilianPortugueseFallsBackToPortuguese() {
        let map = VoiceMap(available: ["en", "pt"])
        #expect(map.voice(for: "pt-BR") == VoiceMap.Choice(voice: "pt", language: "pt", fellBack: false))
    }

    @Test(arguments: ["zh", "zh-CN", "zh-TW", "zh-HK", "zh-Hans-CN", "zh-Hant-TW", "zh_TW.UTF-8", "cmn", "zh-cmn"])
    func chineseGoesToThePinyinVoice(tag: String) {
        #expect(espeak.voice(for: tag) == VoiceMap.Choice(voice: "cmn-latn-pinyin", language: "zh", fellBack: false))
    }

    @Test func chineseWithoutThePinyinVoice() {
        let map = VoiceMap(available: ["en", "cmn"])
        #expect(map.voice(for: "zh-CN") == VoiceMap.Choice(voice: "cmn", language: "zh", fellBack: false))
        #expect(VoiceMap(available: ["en"]).voice(for: "zh-CN").fellBack)
    }

    @Test func cantoneseGoesToTheCantoneseVoice() {
        #expect(espeak.voice(for: "yue-HK") == VoiceMap.Choice(voice: "yue", language: "zh", fellBack: false))
        #expect(espeak.voice(for: "zh-yue") == VoiceMap.Choice(voice: "yue", language: "zh", fellBack: false))
    }

    @Test(arguments: ["xx-YY", "xx", "tlh", "12", "x-private", "-", "ko KR"])
    func unknownFallsBackToEnglish(tag: String) {
        #expect(espeak.voice(for: tag) == VoiceMap.Choice(voice: "en", language: "en", fellBack: true))
    }

    @Test(arguments: ["C", "POSIX", "", "C.UTF-8", " c "])
    func posixDefaultLocaleIsEnglishWithoutFallingBack(tag: String) {
        #expect(espeak.voice(for: tag) == VoiceMap.Choice(voice: "en", language: "en", fellBack: false))
    }

    @Test(arguments: [
        ("ko_KR.UTF-8", "ko"), ("ja_JP.eucJP", "ja"), ("de_DE@euro", "de"), ("pt_BR.utf8", "pt-br"),
        ("es_MX.UTF-8", "es-419")
    ])
    func posixLocales(locale: String, voice: String) {
        #expect(espeak.voice(for: locale).voice == voice)
        #expect(!espeak.voice(for: locale).fellBack)
    }

    @Test func withoutAnyVoiceEverythingFallsBack() {
        #expect(VoiceMap(available: []).voice(for: "ko-KR") == VoiceMap.Choice(voice: "en", language: "en", fellBack: true))
    }

    @Test func candidates() {
        #expect(VoiceMap.candidates(for: "pt-BR") == ["pt-br", "pt"])
        #expect(VoiceMap.candidates(for: "ko_KR.UTF-8") == ["ko-kr", "ko"])
        #expect(VoiceMap.candidates(for: "es-MX") == ["es-mx", "es-419", "es"])
        #expect(VoiceMap.candidates(for: "sr-Latn-RS") == ["sr-latn-rs", "sr-rs", "sr"])
        #expect(VoiceMap.candidates(for: "de") == ["de"])
        #expect(VoiceMap.candidates(for: "zh-TW") == ["cmn-latn-pinyin", "cmn", "zh"])
        #expect(VoiceMap.candidates(for: "yue") == ["yue", "cmn-latn-pinyin", "cmn", "zh"])
        #expect(VoiceMap.candidates(for: "POSIX") == ["en"])
        #expect(VoiceMap.candidates(for: "x-private").isEmpty)
    }

    @Test(arguments: [
        ("ko_KR.UTF-8", "ko-KR"), ("en_US", "en-US"), ("de_DE@euro", "de-DE"), ("ja", "ja"),
        ("pt_BR.utf8", "pt-BR"), ("es_419.UTF-8", "es-419"), (" fr_FR.UTF-8\n", "fr-FR")
    ])
    func posixLocaleToTag(locale: String, tag: String) {
        #expect(VoiceMap.languageTag(fromPOSIXLocale: locale) == tag)
    }

    @Test(arguments: ["C", "POSIX", "", "C.UTF-8", "english", "ko_KR_x", "en_USA", "1_2"])
    func posixLocalesWithoutALanguage(locale: String) {
        #expect(VoiceMap.languageTag(fromPOSIXLocale: locale) == nil)
    }
}
