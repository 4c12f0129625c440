import Foundation
import Hummingbird
public import Mustache

/// The owners' pages in the language the owner reads: the eight languages the cars speak.
///
/// The English text is the key. Templates mark it `{{#t}}Sign out{{/t}}` (a section may hold
/// values, `{{#t}}Buy usage for {{label}}{{/t}}`: the translation is rendered as a template of
/// its own, with the same values and the same escaping); Swift code asks ``callAsFunction(_:_:)``
/// with `{name}` placeholders. Each other language is one JSON object of English → its text in
/// `Owners/Pages/text/<code>.json`; a phrase missing there is shown in English, and a test keeps
/// every catalog complete.
public struct PageText: Sendable {
    public let language: String
    private let phrases: [String: String]

    public static let english = PageText(language: "en", phrases: [:])

    /// The request's texts, set for the request by the owners' router (the owner's chosen
    /// language, else the browser's first one the cars speak, else English).
    @TaskLocal public static var current = english

    init(language: String, phrases: [String: String]) {
        self.language = language
        self.phrases = phrases
    }

    /// The texts of `language` (English if it is not one the pages are written in).
    public static func of(_ language: String?) -> PageText {
        guard let language, language != "en", let phrases = catalogs[language] else { return english }
        return PageText(language: language, phrases: phrases)
    }

    /// `english` in this language, each `{name}` replaced by its value (values are plain text:
    /// the page escapes the whole when it shows it).
    public func callAsFunction(_ english: String, _ values: [String: String] = [:]) -> String {
        // One pass: a value that holds `{name}` itself stays as it is.
        let text = phrases[english] ?? english
        guard !values.isEmpty else { return text }
        var out = ""
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            out += rest[..<open]
            if let close = rest[open...].firstIndex(of: "}"), let value = values[String(rest[rest.index(after: open)..<close])] {
                out += value
                rest = rest[rest.index(after: close)...]
            } else {
                out.append("{")
                rest = rest[rest.index(after: open)...]
            }
        }
        return out + rest
    }

    /// `{{#t}}…{{/t}}`: the section's own text translated, then rendered with the page's values
    /// and escaped by scalar, as everything else on the page.
    public var lambda: MustacheLambda {
        let phrases = phrases
        return MustacheLambda { (text: String) -> Any? in HTMLText.pragma + (phrases[text] ?? text) }
    }

    /// The languages the cars speak, with their own names.
    public static let languages: [(code: String, name: String)] = [
        ("en", "English"), ("ko", "한국어"), ("ja", "日本語"), ("zh", "中文"), ("de", "Deutsch"), ("es", "Español"), ("fr", "Français"),
        ("pt", "Português")
    ]

    /// The first language of an `Accept-Language` header the cars speak (by primary subtag,
    /// ignoring q=0); nil if none.
    public static func language(acceptLanguage: String?) -> String? {
        guard let header = acceptLanguage, header.utf8.count <= 512 else { return nil }
        let ranked = header.split(separator: ",").enumerated().compactMap { index, item -> (tag: String, q: Double, index: Int)? in
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let tag = parts.first?.lowercased(), !tag.isEmpty else { return nil }
            let q = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
            return q > 0 && q <= 1 ? (tag, q, index) : nil
        }.sorted { ($0.q, -$0.index) > ($1.q, -$1.index) }
        for entry in ranked {
            let primary = String(entry.tag.split(separator: "-").first ?? "")
            if languages.contains(where: { $0.code == primary }) { return primary }
        }
        return nil
    }

    /// Waits: `1 minute`, `3 minutes`.
    public func minutes(_ count: Int) -> String {
        count == 1 ? self("1 minute") : self("{n} minutes", ["n": number(count)])
    }

    public func days(_ count: Int) -> String {
        count == 1 ? self("1 day") : self("{n} days", ["n": number(count)])
    }

    public func number(_ value: Int) -> String {
        value.formatted(.number.locale(Locale(identifier: language)))
    }

    public func number(_ value: Double, fractionDigits: Int) -> String {
        value.formatted(.number.precision(.fractionLength(fractionDigits)).locale(Locale(identifier: language)))
    }

    /// Every catalog but English's, read once from the templates' folder.
    static let catalogs: [String: [String: String]] = {
        guard let folder = OwnerTemplates.folder.map({ $0 + "/text" }),
            let files = try? FileManager.default.contentsOfDirectory(atPath: folder)
        else { return [:] }
        var catalogs: [String: [String: String]] = [:]
        for file in files where file.hasSuffix(".json") {
            guard let data = FileManager.default.contents(atPath: folder + "/" + file),
                let phrases = try? JSONDecoder().decode([String: String].self, from: data)
            else { continue }
            catalogs[String(file.dropLast(5))] = phrases
        }
        return catalogs
    }()
}

/// Sets ``PageText/current`` for a request from its `Accept-Language` (a signed-in owner's own
/// choice replaces it in ``OwnerPages/signedIn(_:_:)``).
struct PageLanguage<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await PageText.$current.withValue(.of(PageText.language(acceptLanguage: request.headers[.acceptLanguage]))) {
            try await next(request, context)
        }
    }
}
