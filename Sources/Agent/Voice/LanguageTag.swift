/// A well-formed BCP 47 language tag (RFC 5646, section 2.1): `ko-KR`, `pt-BR`, `es-419`,
/// `zh-Hant-TW`, `en-US-u-ca-gregory`. Only the syntax is checked, not the registry, so a tag
/// eSpeak-ng has no voice for still passes (``VoiceMap`` falls back for it); the language itself
/// must be a 2- or 3-letter code.
///
/// ``description`` is the tag in its conventional case: language lowercase, script title case,
/// region uppercase (`KO-kr` → `ko-KR`). Tags compare equal regardless of case, as BCP 47 says.
public struct LanguageTag: Sendable, Hashable, CustomStringConvertible {
    public let description: String

    /// What a config key holding a tag accepts, for error messages.
    public static let expected = "a BCP 47 language tag such as ko-KR, en-US, es-419 or zh-Hant-TW"

    /// Nil unless `text` is a well-formed tag. Private-use-only (`x-…`) and the irregular
    /// grandfathered tags (`i-klingon`) name no language and are refused; so are POSIX names (`ko_KR`).
    public init?(_ text: String) {
        let subtags = text.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        guard subtags.allSatisfy({ (1...8).contains($0.count) && $0.allSatisfy(\.isASCIIAlphanumeric) }) else { return nil }
        var rest = subtags[...]
        var parts: [String] = []

        // language: 2–3 letters, with up to three 3-letter extlangs. The syntax also allows 5–8
        // letters, but none is registered and "korean" or "english" is a mistake worth naming.
        guard let language = rest.popFirst(), (2...3).contains(language.count), language.allSatisfy(\.isLetter)
        else { return nil }
        parts.append(language.lowercased())
        var extlangs = 0
        while extlangs < 3, let next = rest.first, next.count == 3, next.allSatisfy(\.isLetter) {
            parts.append(next.lowercased())
            rest.removeFirst()
            extlangs += 1
        }
        // script: 4 letters.
        if let next = rest.first, next.count == 4, next.allSatisfy(\.isLetter) {
            parts.append(next.prefix(1).uppercased() + next.dropFirst().lowercased())
            rest.removeFirst()
        }
        // region: 2 letters or 3 digits.
        if let next = rest.first,
            (next.count == 2 && next.allSatisfy(\.isLetter)) || (next.count == 3 && next.allSatisfy(\.isNumber))
        {
            parts.append(next.uppercased())
            rest.removeFirst()
        }
        // variants: 5–8 characters, or a digit and 3 more.
        while let next = rest.first, next.count >= 5 || (next.count == 4 && next.first!.isNumber) {
            parts.append(next.lowercased())
            rest.removeFirst()
        }
        // extensions: a singleton other than x, then subtags of 2–8 characters.
        while let singleton = rest.first, singleton.count == 1, singleton.lowercased() != "x" {
            rest.removeFirst()
            var items: [String] = []
            while let next = rest.first, next.count >= 2 {
                items.append(next.lowercased())
                rest.removeFirst()
            }
            guard !items.isEmpty else { return nil }
            parts += [singleton.lowercased()] + items
        }
        // private use: x, then subtags of 1–8 characters, to the end.
        if let x = rest.first, x.lowercased() == "x" {
            rest.removeFirst()
            guard !rest.isEmpty else { return nil }
            parts += ["x"] + rest.map { $0.lowercased() }
            rest = []
        }
        guard rest.isEmpty else { return nil }
        description = parts.joined(separator: "-")
    }
}

extension Character {
    fileprivate var isASCIIAlphanumeric: Bool { isASCII && (isLetter || isNumber) }
}
