import Foundation
@testable import GuidanceServer
import Mustache
import Testing

/// The owners' pages in the eight languages the cars speak: every phrase the pages and their
/// code ask for is in every catalog, with its values, placeholders and markup kept.
@Suite struct PageTextTests {
    static let owners = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/GuidanceServer/Owners")

    /// Every English phrase: `{{#t}}…{{/t}}` in the templates, `t("…")` in the code.
    static func phrases() throws -> Set<String> {
        var phrases: Set<String> = ["1 minute", "{n} minutes", "1 day", "{n} days"]
        let section = /\{\{#t\}\}(.*?)\{\{\/t\}\}/
        let call = /\bt\(\s*"((?:[^"\\]|\\.)*)"/
        for file in try FileManager.default.contentsOfDirectory(atPath: owners.path + "/Pages") where file.hasSuffix(".mustache") {
            let text = try String(contentsOfFile: owners.path + "/Pages/" + file, encoding: .utf8)
            phrases.formUnion(text.matches(of: section).map { String($0.output.1) })
        }
        for file in try FileManager.default.contentsOfDirectory(atPath: owners.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOfFile: owners.path + "/" + file, encoding: .utf8)
            for match in text.matches(of: call) {
                let phrase = String(match.output.1)
                #expect(!phrase.contains("\\("), "\(file): a phrase is interpolated, so no catalog can hold it: \(phrase)")
                phrases.insert(phrase.replacingOccurrences(of: "\\\"", with: "\""))
            }
        }
        return phrases
    }

    /// What a translation must keep: values, placeholders and tags.
    static func kept(_ text: String) -> [String] {
        let values: [String] = text.matches(of: /\{\{[^}]*\}\}/).map { String($0.output) }
        let placeholders: [String] = text.replacing(/\{\{[^}]*\}\}/, with: "").matches(of: /\{[a-z]+\}/).map { String($0.output) }
        let tags: [String] = text.matches(of: /<[^>]+>/).map { String($0.output) }
        return (values + placeholders + tags).sorted()
    }

    @Test func everyCatalogHasEveryPhraseWithItsValuesAndMarkup() throws {
        let phrases = try Self.phrases()
        #expect(phrases.count > 100)
        #expect(Set(PageText.catalogs.keys) == Set(PageText.languages.map(\.code)).subtracting(["en"]))
        for (language, catalog) in PageText.catalogs {
            let missing = phrases.subtracting(catalog.keys), stale = Set(catalog.keys).subtracting(phrases)
            #expect(missing.isEmpty, "\(language) lacks \(missing.sorted())")
            #expect(stale.isEmpty, "\(language) has phrases no page asks for: \(stale.sorted())")
            for (english, text) in catalog {
                #expect(Self.kept(english) == Self.kept(text), "\(language): \(english) → \(text)")
                // A unit (`{km} km`) may read the same; words may not.
                let words = english.replacing(/\{[^}]*\}+/, with: "").filter(\.isLetter)
                #expect(text != english || words.count <= 4, "\(language): not translated: \(english)")
            }
        }
    }

    @Test func aPageIsInItsLanguageWithValuesEscapedInsideTheTranslation() async throws {
        let library = try await OwnerTemplates.library()
        let korean = PageText.of("ko")
        let page = try #require(
            library.render(
                [
                    "t": korean.lambda, "lang": "ko", "title": "x", "signedIn": true, "csrf": "c",
                    "devices": [["device": "d", "label": "\"><script>", "guidance": []]]
                ],
                withTemplate: "devices"))
        #expect(page.contains("<html lang=\"ko\">"))
        #expect(page.contains(korean("Sign out")) && korean("Sign out") != "Sign out")
        #expect(page.contains(korean("Remaining usage")))
        #expect(!page.contains("<script>") && page.contains("&quot;&gt;&lt;script&gt;"))
    }

    /// A phrase inside an inverted section over an empty list would render nothing (swift-mustache
    /// renders a lambda's text against the list): the pages say "none" with a flag instead, and
    /// no template names a list there.
    @Test func aPhraseForNothingIsShown() async throws {
        let library = try await OwnerTemplates.library()
        let text = PageText.of("ja")
        let devices = try #require(library.render(["t": text.lambda, "devices": [] as [Any], "hasDevices": false], withTemplate: "devices"))
        #expect(devices.contains(text("No car is paired to your account yet. <a href=\"/pair\">Pair a car</a>.")))
        let guidance = try #require(
            library.render(
                [
                    "t": text.lambda, "devices": [["device": "d", "guidance": [] as [Any], "hasGuidance": false]],
                    "hasDevices": true
                ], withTemplate: "devices"))
        #expect(guidance.contains(text("None yet.")))
        let events = try #require(library.render(["t": text.lambda, "events": [] as [Any], "hasEvents": false], withTemplate: "events"))
        #expect(
            events.contains(
                text(
                    "No event yet. When a car feels an impact, records something while parked, or is told to keep a clip, it sends the video here."
                )))
        let inverted = /\{\{\^([a-zA-Z]+)\}\}/
        for file in try FileManager.default.contentsOfDirectory(atPath: Self.owners.path + "/Pages") where file.hasSuffix(".mustache") {
            let template = try String(contentsOfFile: Self.owners.path + "/Pages/" + file, encoding: .utf8)
            for name in template.matches(of: inverted).map({ String($0.output.1) }) {
                #expect(
                    ["place", "current", "signedIn", "askZone", "mailRelay"].contains(name) || name.hasPrefix("has"),
                    "\(file): {{^\(name)}} may be a list")
            }
        }
    }

    @Test func placeholdersAndCountsAreWrittenForTheLanguage() {
        let german = PageText.of("de"), english = PageText.english
        #expect(english.minutes(1) == "1 minute" && english.minutes(3) == "3 minutes")
        #expect(english.days(7) == "7 days")
        #expect(english("Renamed to {name}.", ["name": "{name} {n}"]) == "Renamed to {name} {n}.", "a value is not filled in again")
        #expect(english("Trip of {name}, {time}", ["time": "x"]) == "Trip of {name}, x")
        #expect(german.number(1234) == "1.234")
        #expect(german.days(30).contains("30") && german.days(30) != "30 days")
        #expect(PageText.of("tlh").language == "en" && PageText.of(nil)("Sign in") == "Sign in")
        #expect(OwnerPages.spoken(3 * 3600 + 5 * 60, english) == "3 h 5 min")
    }
}
