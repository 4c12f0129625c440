import Foundation
@testable import GuidanceServer
import Mustache
import PropertyBased
import Testing

/// Every value in every owner page is escaped by Unicode scalar: random strings full of quotes,
/// brackets, ampersands and combining marks never add a raw `"`, `'`, `<` or `>` scalar to a
/// page, and every `&` they add starts an entity.
@Suite struct OwnerTemplateEscapingTests {
    /// What a hostile value is made of: markup, combining marks (U+0301 and an enclosing one),
    /// joiners, an emoji, a right-to-left override, NUL, plain letters.
    static let alphabet: [Unicode.Scalar] = [
        "\"", "'", "<", ">", "&", "=", ";", "#", "\u{0301}", "\u{20DD}", "\u{200D}", "\u{1F697}",
        "\u{202E}", "\u{0}", "a", "x", " ", "/", "é"
    ]
    static let hostile = Gen.element(of: alphabet).array(of: 0...40).map { scalars in
        var text = String.UnicodeScalarView()
        text.append(contentsOf: scalars.compactMap { $0 })
        return String(text)
    }

    static let markup: Set<Unicode.Scalar> = ["\"", "'", "<", ">"]
    static let entities = ["&lt;", "&gt;", "&amp;", "&quot;", "&#39;"]

    @Test func anEscapedValueHasNoRawMarkupAndReadsBackAsItWas() async {
        await propertyCheck(count: 500, input: Self.hostile) { text in
            let escaped = HTMLText.escape(text)
            #expect(!escaped.unicodeScalars.contains { Self.markup.contains($0) }, "\(escaped.debugDescription)")
            #expect(Self.ampersandsStartEntities(escaped), "\(escaped.debugDescription)")
            #expect(Self.unescaped(escaped) == Array(text.unicodeScalars))
        }
    }

    /// The scalars `escaped` stands for: each entity read back, scalar by scalar (a `String`
    /// search would miss `&gt;` whose `;` carries a combining mark).
    static func unescaped(_ escaped: String) -> [Unicode.Scalar] {
        let scalars = Array(escaped.unicodeScalars)
        var out: [Unicode.Scalar] = [], index = 0
        while index < scalars.count {
            if let (entity, scalar) = zip(entities, ["<", ">", "&", "\"", "'"] as [Unicode.Scalar]).first(where: { entity, _ in
                scalars[index..<min(scalars.count, index + entity.unicodeScalars.count)].elementsEqual(entity.unicodeScalars)
            }) {
                out.append(scalar)
                index += entity.unicodeScalars.count
            } else {
                out.append(scalars[index])
                index += 1
            }
        }
        return out
    }

    /// Every `&` scalar begins one of the five entities.
    static func ampersandsStartEntities(_ text: String) -> Bool { strayAmpersands(text) == 0 }

    /// How many `&` scalars begin none of the five entities.
    static func strayAmpersands(_ text: String) -> Int {
        let scalars = Array(text.unicodeScalars)
        return scalars.indices.filter { index in
            scalars[index] == "&"
                && !entities.contains { entity in
                    scalars[index..<min(scalars.count, index + entity.unicodeScalars.count)].elementsEqual(entity.unicodeScalars)
                }
        }.count
    }

    /// Every value a template shows, set to `value`, nested as the pages nest them.
    static func values(_ value: String, _ text: PageText = .english) -> [String: Any] {
        let guidance: [[String: Any]] = [["at": value, "text": value]]
        let car: [String: Any] = [
            "device": value, "label": value, "remaining": value, "pairedSince": value, "lastSeen": value,
            "guidance": guidance
        ]
        let session: [String: Any] = ["id": value, "created": value, "agent": value, "expires": value, "current": true]
        let product: [String: Any] = ["index": value, "name": value, "price": value, "device": value]
        let place: [String: Any] = ["text": value, "map": value]
        let trip: [String: Any] = [
            "device": value, "start": value, "car": value, "from": value, "to": value, "distance": value,
            "duration": value, "topSpeed": value, "startPlace": place, "endPlace": place
        ]
        let drawing: [String: Any] = ["height": value, "points": value, "startX": value, "startY": value, "endX": value, "endY": value]
        return trip.merging(["trips": [trip], "hasTrips": true, "drawing": drawing]) { a, _ in a }.merging([
            "t": text.lambda, "lang": text.language, "title": value, "csrf": value, "token": value, "email": value, "problem": value,
            "notice": value, "deviceName": value,
            "code": value, "price": value, "product": value, "payment": value, "next": value, "nextLabel": value, "signedIn": true,
            "address": value, "mailRelay": true,
            "devices": [car], "sessions": [session], "products": [product]
        ]) { a, _ in a }
    }

    @Test func noTemplateLetsAValueAddMarkup() async throws {
        let library = try await OwnerTemplates.library()
        let names = try FileManager.default.contentsOfDirectory(atPath: try #require(OwnerTemplates.folder))
            .filter { $0.hasSuffix(".mustache") }.map { String($0.dropLast(".mustache".count)) }
        #expect(names.count >= 8)
        // In every language: a translated phrase holding a value escapes it as the page does.
        for name in names {
            for language in PageText.languages.map({ PageText.of($0.code) }) {
                let plain = try #require(library.render(Self.values("x", language), withTemplate: name))
                let counts = { (page: String) in Self.markup.map { mark in page.unicodeScalars.filter { $0 == mark }.count } }
                await propertyCheck(count: language.language == "en" ? 60 : 12, input: Self.hostile) { text in
                    let page = library.render(Self.values(text, language), withTemplate: name) ?? ""
                    #expect(counts(page) == counts(plain), "\(name): a value added markup: \(text.debugDescription)")
                    #expect(Self.strayAmpersands(page) == Self.strayAmpersands(plain), "\(name): a raw & from \(text.debugDescription)")
                }
            }
        }
    }

    /// A template that forgot the content type would fall back to swift-mustache's escaper (by
    /// `Character`): the library refuses to load it.
    @Test func everyTemplateNamesTheScalarEscaper() throws {
        let folder = try #require(OwnerTemplates.folder)
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".mustache") {
            let text = try String(contentsOfFile: folder + "/" + file, encoding: .utf8)
            #expect(text.hasPrefix(HTMLText.pragma), "\(file)")
        }
        #expect(throws: OwnerPagesError.self) { try OwnerTemplates.check("{{> head}}\n<p>{{title}}</p>", named: "forgetful") }
    }
}
