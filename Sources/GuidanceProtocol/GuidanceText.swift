/// What a driver may be told, and what a log line may show of a peer's string: text from a model
/// or a client, made safe to speak and to print.
public enum GuidanceText {
    /// Longest guidance, in characters (grapheme clusters): about 20 s of speech at eSpeak-ng's
    /// default rate for Latin text. Server and agent both cut here.
    public static let maxCharacters = 300
    /// And in UTF-8 bytes, whatever the script: 300 characters of Korean are about 900.
    public static let maxBytes = 1200

    /// `text` normalised for speech: control characters become spaces; direction overrides and
    /// isolates (which can make a log or a screen show other text than is spoken) and other
    /// invisible format characters are removed, except the joiners some scripts need; runs of
    /// white space become one space; then cut, at a character boundary, to ``maxCharacters`` and
    /// ``maxBytes``.
    public static func clean(_ text: some StringProtocol) -> String {
        var scalars = String.UnicodeScalarView()
        var lastWasSpace = true
        for scalar in text.unicodeScalars {
            let space = scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
            if space {
                if !lastWasSpace { scalars.append(" ") }
                lastWasSpace = true
                continue
            }
            if isDropped(scalar) { continue }
            scalars.append(scalar)
            lastWasSpace = false
        }
        var kept = ""
        var bytes = 0
        for character in String(scalars).prefix(maxCharacters) {
            bytes += character.utf8.count
            guard bytes <= maxBytes else { break }
            kept.append(character)
        }
        // After the cut, which may end on the space between two words.
        if kept.last == " " { kept.removeLast() }
        return kept
    }

    /// Invisible format characters other than the zero-width joiner and non-joiner.
    static func isDropped(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x200C, 0x200D: false
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: scalar.properties.generalCategory == .format
        }
    }

    /// `text` for a log line: at most `limit` characters, control and format characters written
    /// as `\u{…}` escapes (a peer's newline cannot start a forged log line), quoted.
    public static func loggable(_ text: some StringProtocol, limit: Int = 64) -> String {
        var out = "\""
        for character in text.prefix(limit) {
            for scalar in character.unicodeScalars {
                let category = scalar.properties.generalCategory
                if category == .control || category == .format || scalar == "\"" || scalar == "\\"
                    || category == .lineSeparator || category == .paragraphSeparator
                {
                    out += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        if text.count > limit { out += "…" }
        return out + "\""
    }
}
