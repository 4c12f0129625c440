public import Mustache

/// How the owners' pages escape a value: by Unicode scalar, never by `Character`. Swift's
/// `Character` is a grapheme cluster, so `"` followed by a combining mark (U+0301) is one
/// `Character` that is not `"`: an escaper that compares characters (swift-mustache's own HTML
/// escaping) lets that quote through raw and a value breaks out of its attribute. Here every
/// `<`, `>`, `&`, `"` and `'` scalar is replaced, whatever follows it.
///
/// Every template names it on its first line (`{{% CONTENT_TYPE: HTML_SCALARS }}`);
/// ``OwnerTemplates/library()`` refuses a template that does not.
public struct HTMLText: MustacheContentType {
    static let name = "HTML_SCALARS"
    static let pragma = "{{% CONTENT_TYPE: \(name) }}"

    public init() {}

    public func escapeText(_ text: String) -> String { Self.escape(text) }

    public static func escape(_ text: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
            case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
            case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
            case "\"": escaped.append(contentsOf: "&quot;".unicodeScalars)
            case "'": escaped.append(contentsOf: "&#39;".unicodeScalars)
            default: escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}
