import Foundation
import Hummingbird
import NIOCore

/// An `application/x-www-form-urlencoded` body, as the OAuth endpoints and the owners' forms get
/// one: read up to a limit, split into fields, percent-decoded. A field given twice makes the
/// whole body unreadable (RFC 6749 §3.1 for OAuth; a form of ours never repeats a name).
public enum FormBody {
    /// The fields of `text`; `nil` if a name or value is not valid percent-encoding, or a name repeats.
    public static func parse(_ text: Substring) -> [String: String]? {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : ""),
                fields.updateValue(value, forKey: name) == nil
            else { return nil }
        }
        return fields
    }

    /// The request's form, or `nil`: another content type, over `maxBytes`, or unreadable.
    static func read(_ request: Request, maxBytes: Int) async -> [String: String]? {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true,
            let buffer = try? await request.body.collect(upTo: maxBytes)
        else { return nil }
        return parse(Substring(String(buffer: buffer)))
    }

    private static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
