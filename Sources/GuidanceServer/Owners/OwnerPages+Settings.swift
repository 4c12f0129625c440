import Foundation
import Hummingbird
import HTTPTypes
import NIOCore

/// The owner's settings: the time zone their pages show times in (asked once: a page without
/// script cannot learn the browser's), the language dates and numbers are written in, and whether
/// a parked car's impact is sent to them by e-mail (``ImpactMail``; only where the server has a
/// relay, `mail.relay`).
extension OwnerPages {
    func addSettings(to router: Router<GuidanceRequestContext>) {
        router.get("/settings") { request, _ in
            try await signedIn(request) { session in try await settingsPage(request, session, notice: nil) }
        }
        router.post("/settings") { request, _ in
            try await signedInForm(request) { session, form in
                let zone = (form["timeZone"] ?? "").trimmingCharacters(in: .whitespaces)
                let language = form["language"] ?? ""
                guard zone.isEmpty || Self.timeZones.contains(zone),
                    language.isEmpty || PageText.languages.contains(where: { $0.code == language })
                else {
                    return try await settingsPage(
                        request, session, notice: nil, problem: t("Choose a time zone and a language from the lists."),
                        status: .badRequest)
                }
                // Without a relay the box cannot be changed (the browser sends nothing for it):
                // what was chosen stays for when there is one.
                var impactMail = form["impactMail"] == "on"
                if !mailRelay { impactMail = try await store.preferences(owner: session.owner).impactMail }
                try await store.setPreferences(
                    owner: session.owner,
                    OwnerPreferences(
                        timeZone: zone.isEmpty ? nil : zone,
                        language: language.isEmpty ? nil : language,
                        impactMail: impactMail))
                // The page that answers is already in the language just chosen.
                let text = PageText.of(language.isEmpty ? PageText.language(acceptLanguage: request.headers[.acceptLanguage]) : language)
                return try await PageText.$current.withValue(text) { try await settingsPage(request, session, notice: t("Saved.")) }
            }
        }
    }

    static let timeZones: Set<String> = Set(TimeZone.knownTimeZoneIdentifiers)

    private func settingsPage(
        _ request: Request, _ session: WebSession, notice: String?, problem: String? = nil,
        status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let chosen = try await store.preferences(owner: session.owner)
        let clock = ownerClock(chosen)
        var values: [String: Any] = [
            "title": t("Settings"),
            "zones": TimeZone.knownTimeZoneIdentifiers.sorted().map { ["zone": $0, "selected": $0 == chosen.timeZone] },
            "languages": PageText.languages.map { ["code": $0.code, "name": $0.name, "selected": $0.code == chosen.language] },
            "now": clock.text(Int64(Date().timeIntervalSince1970 * 1000)),
            "impactMail": chosen.impactMail,
            "mailRelay": mailRelay
        ]
        if let owner = try await store.owner(id: session.owner) { values["address"] = owner.email }
        if let notice { values["notice"] = notice }
        if let problem { values["problem"] = problem }
        return page("settings", session, values, status: status)
    }

    /// How this owner's pages write times: in their time zone (UTC until chosen), in the page's
    /// language (``PageText/current``: theirs, else the browser's first one the cars speak).
    func ownerClock(_ session: WebSession) async throws -> OwnerClock {
        ownerClock(try await store.preferences(owner: session.owner))
    }

    func ownerClock(_ chosen: OwnerPreferences) -> OwnerClock {
        OwnerClock(timeZone: chosen.timeZone.flatMap(TimeZone.init(identifier:)), language: PageText.current.language)
    }
}

/// Times as an owner reads them: in their zone, written the way their language writes dates.
struct OwnerClock: Sendable {
    var timeZone: TimeZone?
    var language: String?

    var isZoneChosen: Bool { timeZone != nil }

    func text(_ ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        var style = Date.FormatStyle(
            date: .abbreviated, time: .shortened, locale: Locale(identifier: language ?? "en"),
            timeZone: timeZone ?? TimeZone(identifier: "UTC")!)
        style = style.timeZone(.specificName(.short))
        return date.formatted(style)
    }
}
