import Foundation

/// A plain-text UTF-8 e-mail (RFC 5322, MIME), as the relay is given it after DATA.
///
/// - Important: header values come partly from outside (a car's name, addresses): each one is
///   checked to hold no line end or other control character, and the message is not made
///   otherwise (``rendered()`` throws), so nothing can add a header or a recipient. The subject
///   is written as RFC 2047 encoded words whenever it is not short printable ASCII.
struct MailMessage: Sendable {
    var from: String
    var to: String
    var subject: String
    var body: String
    var date: Date
    /// The part of `Message-ID` before its `@`: unique per message.
    var id: String

    struct Refused: Error, Equatable, CustomStringConvertible {
        let header: String
        let reason: String
        var description: String { "the mail's \(header) \(reason)" }
    }

    /// Headers and body, lines ending in CRLF; not yet dot-stuffed (``data(_:)``).
    func rendered() throws(Refused) -> [UInt8] {
        guard Self.isAddress(from) else { throw Refused(header: "From", reason: "is not a plain address like alerts@example.org") }
        guard Self.isAddress(to) else { throw Refused(header: "To", reason: "is not a plain address like ana@example.org") }
        guard Self.isHeaderSafe(subject) else { throw Refused(header: "Subject", reason: "holds a line end or another control character") }
        let domain = from.split(separator: "@").last.map(String.init) ?? "localhost"
        var headers = [
            "From: " + from,
            "To: " + to,
            "Subject: " + Self.encodedSubject(subject),
            "Date: " + Self.dateText(date),
            "Message-ID: <\(id)@\(domain)>",
            "MIME-Version: 1.0",
            "Content-Type: text/plain; charset=utf-8"
        ]
        // One line end, CRLF, whatever the text had; no bare CR survives.
        let lines = body.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
            .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let bodyText: String
        if body.unicodeScalars.allSatisfy({ $0.isASCII }), lines.allSatisfy({ $0.utf8.count <= 998 }) {
            headers.append("Content-Transfer-Encoding: 7bit")
            bodyText = lines.joined(separator: "\r\n")
        } else {
            headers.append("Content-Transfer-Encoding: base64")
            let encoded = Data(lines.joined(separator: "\r\n").utf8).base64EncodedString()
            bodyText = stride(from: 0, to: encoded.count, by: 76).map { start in
                let from = encoded.index(encoded.startIndex, offsetBy: start)
                return String(encoded[from..<(encoded.index(from, offsetBy: 76, limitedBy: encoded.endIndex) ?? encoded.endIndex)])
            }.joined(separator: "\r\n")
        }
        return Array((headers.joined(separator: "\r\n") + "\r\n\r\n" + bodyText + "\r\n").utf8)
    }

    /// What follows DATA: `message` with every line that starts with `.` given a second one
    /// (RFC 5321 §4.5.2), a final CRLF if it had none, and the `.` line that ends it.
    static func data(_ message: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.count + 16)
        var lineStart = true
        for byte in message {
            if lineStart, byte == UInt8(ascii: ".") { out.append(UInt8(ascii: ".")) }
            out.append(byte)
            lineStart = byte == UInt8(ascii: "\n")
        }
        if !out.isEmpty, !lineStart { out += Array("\r\n".utf8) }
        return out + Array(".\r\n".utf8)
    }

    /// A header value: no control character at all (CR and LF above all), at most 998 bytes.
    static func isHeaderSafe(_ value: String) -> Bool {
        value.utf8.count <= 998 && !value.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// A plain address (`local@domain`) that may go into a header and an SMTP command: printable
    /// ASCII, no space, no `<>()[],;:"\`, one `@` between non-empty parts, at most 254 bytes.
    static func isAddress(_ value: String) -> Bool {
        let parts = value.split(separator: "@", omittingEmptySubsequences: false)
        return value.utf8.count <= 254 && parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && parts[1].utf8.count <= 253
            && value.unicodeScalars.allSatisfy {
                $0.isASCII && $0.value > 32 && $0.value < 127 && !"<>()[],;:\"\\".unicodeScalars.contains($0)
            }
    }

    /// The subject as it is: printable ASCII that fits a line; otherwise RFC 2047 encoded words
    /// (`=?UTF-8?B?…?=`, each at most 75 characters and whole characters only), folded.
    static func encodedSubject(_ subject: String) -> String {
        if subject.utf8.count <= 66, subject.unicodeScalars.allSatisfy({ $0.value >= 32 && $0.value < 127 }), !subject.contains("=?") {
            return subject
        }
        // 39 bytes make 52 base64 characters: with `=?UTF-8?B?` and `?=`, 64; after `Subject: `, 73
        // (RFC 2047 §2: a line with an encoded word is at most 76 characters).
        var words: [[UInt8]] = []
        var chunk: [UInt8] = []
        for character in subject {
            let bytes = Array(String(character).utf8)
            if !chunk.isEmpty, chunk.count + bytes.count > Self.wordBytes {
                words.append(chunk)
                chunk = []
            }
            // A single character longer than a word (a long grapheme cluster) goes by its scalars.
            if bytes.count > Self.wordBytes {
                for scalar in character.unicodeScalars {
                    let scalarBytes = Array(String(scalar).utf8)
                    if chunk.count + scalarBytes.count > Self.wordBytes {
                        words.append(chunk)
                        chunk = []
                    }
                    chunk += scalarBytes
                }
            } else {
                chunk += bytes
            }
        }
        if !chunk.isEmpty || words.isEmpty { words.append(chunk) }
        return words.map { "=?UTF-8?B?" + Data($0).base64EncodedString() + "?=" }.joined(separator: "\r\n ")
    }

    static let wordBytes = 39

    /// RFC 5322 §3.3, in UTC: `Sun, 29 Nov 2026 08:02:30 +0000`.
    static func dateText(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        return formatter.string(from: date)
    }
}
