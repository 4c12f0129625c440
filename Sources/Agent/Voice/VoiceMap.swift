/// Chooses the eSpeak-ng voice for a locale: a BCP 47 tag (`pt-BR`) or a POSIX locale (`ko_KR.UTF-8`).
///
/// Voice names are what `espeak_SetVoiceByName` (and `espeak-ng -v`) accepts: the file name of a
/// voice, that is the last path component of `espeak_VOICE.identifier` from `espeak_ListVoices(NULL)`
/// (`gmw/en-US` → `en-us`, `sit/cmn-Latn-pinyin` → `cmn-latn-pinyin`), in any case. The language
/// column of `espeak-ng --voices` is something else: `en-gb`, `fr-fr` and `zh` are languages there
/// but no voice has that file name, so `espeak_SetVoiceByName` answers `EE_NOT_FOUND` for them and
/// keeps the voice it had. Build `available` with `voiceNames(identifiers:)`.
///
/// Chinese goes to `cmn-latn-pinyin`: the plain `cmn` voice of eSpeak-ng 1.51 reads Chinese
/// characters as their pinyin spelled out in English ("yi three lian two…").
public struct VoiceMap: Sendable {
    public struct Choice: Sendable, Hashable {
        /// A name for `espeak_SetVoiceByName`.
        public var voice: String
        /// The language of the voice as a primary subtag, for `StatusPhrase.text(language:)`:
        /// `zh` for the Chinese voices, `en` when the map fell back.
        public var language: String
        /// No voice speaks the tag's language, so `voice` is the default, English.
        public var fellBack: Bool
    }

    /// For `C`, `POSIX`, an empty locale, and any language without a voice.
    public static let defaultVoice = "en"

    /// Voice names, lowercased.
    public let available: Set<String>

    public init(available: Set<String>) {
        self.available = Set(available.map { $0.lowercased() })
    }

    /// Voice names from `espeak_VOICE.identifier` values: `gmw/en-US` → `en-us`.
    public static func voiceNames(identifiers: some Sequence<String>) -> Set<String> {
        Set(identifiers.map { String($0.split(separator: "/").last ?? "").lowercased() }.filter { !$0.isEmpty })
    }

    /// The first of `candidates(for:)` that is available, else the default voice.
    public func voice(for tag: String) -> Choice {
        let parsed = ParsedTag(tag)
        for candidate in parsed.candidates where available.contains(candidate) {
            return Choice(voice: candidate, language: parsed.textLanguage, fellBack: false)
        }
        return Choice(voice: Self.defaultVoice, language: "en", fellBack: true)
    }

    /// Voice names to try for `tag`, best first: the whole tag, the language with its region, a
    /// regional voice of eSpeak-ng (`es-419` for Spanish of the Americas), the language alone.
    /// Chinese and Mandarin tags (`zh`, `zh-TW`, `cmn`) give the Mandarin voices instead, Cantonese
    /// tags (`yue`, `zh-yue`) the Cantonese voice first. `C` and `POSIX` give `en`; a string that
    /// is no language tag gives none.
    public static func candidates(for tag: String) -> [String] {
        ParsedTag(tag).candidates
    }

    /// The BCP 47 tag of a POSIX locale name: `ko_KR.UTF-8` → `ko-KR`, `de_DE@euro` → `de-DE`.
    /// Nil for `C`, `POSIX`, `C.UTF-8`, an empty string, and anything that is not
    /// `language[_territory][.codeset][@modifier]`.
    public static func languageTag(fromPOSIXLocale posix: String) -> String? {
        let name = posix.trimmingWhitespace.prefix { $0 != "." && $0 != "@" }
        let parts = name.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count <= 2, let language = parts.first?.lowercased(),
            (2...3).contains(language.count), language.allSatisfy(\.isASCIILetter)
        else { return nil }
        guard parts.count == 2 else { return language }
        let territory = parts[1]
        guard
            (territory.count == 2 && territory.allSatisfy(\.isASCIILetter))
                || (territory.count == 3 && territory.allSatisfy(\.isASCIIDigit))
        else { return nil }
        return "\(language)-\(territory.uppercased())"
    }
}

extension VoiceMap {
    /// A tag taken apart: lowercased, `_` read as `-`, a POSIX codeset or modifier dropped, and
    /// extensions and private use (from the first single-letter subtag on) ignored.
    private struct ParsedTag {
        var subtags: [String] = []
        var language = ""
        var region: String?
        var isPOSIXDefault = false

        init(_ tag: String) {
            let name = tag.trimmingWhitespace.prefix { $0 != "." && $0 != "@" }.lowercased()
            if name.isEmpty || name == "c" || name == "posix" {
                isPOSIXDefault = true
                return
            }
            let all = name.split(whereSeparator: { $0 == "-" || $0 == "_" }).map(String.init)
            subtags = Array(all.prefix { $0.count > 1 })
            guard let first = subtags.first, (2...8).contains(first.count), first.allSatisfy(\.isASCIILetter) else {
                subtags = []
                return
            }
            language = first
            var rest = subtags.dropFirst()
            // An extended language subtag names the language itself: zh-yue is Cantonese.
            if let extlang = rest.first, extlang.count == 3, extlang.allSatisfy(\.isASCIILetter) {
                if language == "zh" { language = extlang }
                rest = rest.dropFirst()
            }
            if let script = rest.first, script.count == 4, script.allSatisfy(\.isASCIILetter) {
                rest = rest.dropFirst()
            }
            if let region = rest.first,
                (region.count == 2 && region.allSatisfy(\.isASCIILetter))
                    || (region.count == 3 && region.allSatisfy(\.isASCIIDigit))
            {
                self.region = region
            }
        }

        var candidates: [String] {
            if isPOSIXDefault { return [VoiceMap.defaultVoice] }
            if subtags.isEmpty { return [] }
            let mandarin = ["cmn-latn-pinyin", "cmn", "zh"]
            var list: [String]
            switch language {
            case "zh", "cmn":
                list = mandarin
            case "yue":
                list = ["yue"] + mandarin
            default:
                list = [subtags.joined(separator: "-")]
                if let region {
                    list.append("\(language)-\(region)")
                    if let regional = Self.regionalVoices[language]?[region] { list.append(regional) }
                }
                list.append(language)
            }
            var seen = Set<String>()
            return list.filter { seen.insert($0).inserted }
        }

        /// The language of the texts to speak with this locale's voice.
        var textLanguage: String {
            switch language {
            case "": "en"
            case "cmn", "yue": "zh"
            default: language
            }
        }

        /// Voices eSpeak-ng has for a group of regions rather than one.
        static let regionalVoices: [String: [String: String]] = [
            "es": Dictionary(
                uniqueKeysWithValues: [
                    "419", "ar", "bo", "cl", "co", "cr", "cu", "do", "ec", "gt", "hn", "mx", "ni", "pa", "pe", "pr",
                    "py", "sv", "us", "uy", "ve"
                ].map { ($0, "es-419") })
        ]
    }
}

extension StringProtocol {
    fileprivate var trimmingWhitespace: SubSequence {
        let start = firstIndex { !$0.isWhitespace } ?? endIndex
        let end = lastIndex { !$0.isWhitespace }.map(index(after:)) ?? start
        return self[start..<end]
    }
}

extension Character {
    fileprivate var isASCIILetter: Bool { isASCII && isLetter }
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
