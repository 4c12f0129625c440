import Foundation
import Hummingbird
import Mustache

/// The owners' pages in the language the owner reads: the eight languages the cars speak.
///
/// The English text is the key. Templates mark it `{{#t}}Sign out{{/t}}` (a section may hold
/// values, `{{#t}}Buy usage for {{label}}{{/t}}`: the translation is rendered as a template of
/// its own, with the same values and the same escaping); Swift code asks ``callAsFunction(_:_:)``
/// with `{name}` placeholders. Each other language is one JSON object of English → its text in
/// `Owners/Pages/text/<code>.json`; a phrase missing there is shown in English, and a test keeps
/// every catalog complete.
struct PageText: Sendable {
    let language: String
    private let phrases: [String: String]

    static let english = PageText(language: "en", phrases: [:])

    /// The request's texts, set for the request by the owners' router (the owner's chosen
    /// language, else the browser's first one the cars speak, else English).
    @TaskLocal static var current = english

    init(language: String, phrases: [String: String]) {
        self.language = language
        self.phrases = phrases
    }

    /// The texts of `language` (English if it is not one the pages are written in).
    static func of(_ language: String?) -> PageText {
        guard let language, language != "en", let phrases = catalogs[language] else { return english }
        return PageText(language: language, phrases: phrases)
    }

    /// `english` in this language, each `{name}` replaced by its value (values are plain text:
    /// the page escapes the whole when it shows it).
    func callAsFunction(_ english: String, _ values: [String: String] = [:]) -> String {
        var text = phrases[english] ?? english
        for (name, value) in values { text = text.replacingOccurrences(of: "{\(name)}", with: value) }
        return text
    }

    /// `{{#t}}…{{/t}}`: the section's own text translated, then rendered with the page's values
    /// and escaped by scalar, as everything else on the page.
    var lambda: MustacheLambda {
        let phrases = phrases
        return MustacheLambda { (text: String) -> Any? in HTMLText.pragma + (phrases[text] ?? text) }
    }

    /// Waits: `1 minute`, `3 minutes`.
    func minutes(_ count: Int) -> String {
        count == 1 ? self("1 minute") : self("{n} minutes", ["n": number(count)])
    }

    func days(_ count: Int) -> String {
        count == 1 ? self("1 day") : self("{n} days", ["n": number(count)])
    }

    func number(_ value: Int) -> String {
        value.formatted(.number.locale(Locale(identifier: language)))
    }

    func number(_ value: Double, fractionDigits: Int) -> String {
        value.formatted(.number.precision(.fractionLength(fractionDigits)).locale(Locale(identifier: language)))
    }

    /// Every catalog but English's, read once from the templates' folder.
    static let catalogs: [String: [String: String]] = {
        guard let folder = OwnerTemplates.folder.map({ $0 + "/text" }),
              let files = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [:] }
        var catalogs: [String: [String: String]] = [:]
        for file in files where file.hasSuffix(".json") {
            guard let data = FileManager.default.contents(atPath: folder + "/" + file),
                  let phrases = try? JSONDecoder().decode([String: String].self, from: data) else { continue }
            catalogs[String(file.dropLast(5))] = phrases
        }
        return catalogs
    }()
}

/// Sets ``PageText/current`` for a request from its `Accept-Language` (a signed-in owner's own
/// choice replaces it in ``OwnerPages/signedIn(_:_:)``).
struct PageLanguage<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await PageText.$current.withValue(.of(OwnerPages.language(acceptLanguage: request.headers[.acceptLanguage]))) {
            try await next(request, context)
        }
    }
}
