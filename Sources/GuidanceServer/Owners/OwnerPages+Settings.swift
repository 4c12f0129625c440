import Foundation
import Hummingbird
import HTTPTypes
import NIOCore

/// The owner's settings: the time zone their pages show times in (asked once: a page without
/// script cannot learn the browser's), the language dates and numbers are written in, and whether
/// a parked car's impact is sent to them by e-mail (``ImpactMail``; only where the server has a
/// relay, `mail.relay`).
extension OwnerPages {
    /// The languages the cars speak, with their own names.
    static let languages: [(code: String, name: String)] = [
        ("en", "English"), ("ko", "한국어"), ("ja", "日本語"), ("zh", "中文"), ("de", "Deutsch"), ("es", "Español"), ("fr", "Français"),
        ("pt", "Português"),
    ]

    func addSettings(to router: Router<GuidanceRequestContext>) {
        router.get("/settings") { request, _ in
            try await signedIn(request) { session in try await settingsPage(request, session, notice: nil) }
        }
        router.post("/settings") { request, _ in
            try await signedInForm(request) { session, form in
                let zone = (form["timeZone"] ?? "").trimmingCharacters(in: .whitespaces)
                let language = form["language"] ?? ""
                guard zone.isEmpty || Self.timeZones.contains(zone), language.isEmpty || Self.languages.contains(where: { $0.code == language }) else {
                    return try await settingsPage(request, session, notice: nil, problem: "Choose a time zone and a language from the lists.",
                                                  status: .badRequest)
                }
                // Without a relay the box cannot be changed (the browser sends nothing for it):
                // what was chosen stays for when there is one.
                var impactMail = form["impactMail"] == "on"
                if !mailRelay { impactMail = try await store.preferences(owner: session.owner).impactMail }
                try await store.setPreferences(owner: session.owner, OwnerPreferences(timeZone: zone.isEmpty ? nil : zone,
                                                                                       language: language.isEmpty ? nil : language,
                                                                                       impactMail: impactMail))
                return try await settingsPage(request, session, notice: "Saved.")
            }
        }
    }

    static let timeZones: Set<String> = Set(TimeZone.knownTimeZoneIdentifiers)

    private func settingsPage(_ request: Request, _ session: WebSession, notice: String?, problem: String? = nil,
                              status: HTTPResponse.Status = .ok) async throws -> Response {
        let chosen = try await store.preferences(owner: session.owner)
        let clock = ownerClock(request, chosen)
        var values: [String: Any] = [
            "title": "Settings",
            "zones": TimeZone.knownTimeZoneIdentifiers.sorted().map { ["zone": $0, "selected": $0 == chosen.timeZone] },
            "languages": Self.languages.map { ["code": $0.code, "name": $0.name, "selected": $0.code == chosen.language] },
            "now": clock.text(Int64(Date().timeIntervalSince1970 * 1000)),
            "impactMail": chosen.impactMail,
            "mailRelay": mailRelay,
        ]
        if let owner = try await store.owner(id: session.owner) { values["address"] = owner.email }
        if let notice { values["notice"] = notice }
        if let problem { values["problem"] = problem }
        return page("settings", session, values, status: status)
    }

    /// How this owner's pages write times: their time zone (UTC until chosen) and language (else
    /// the browser's first one the cars speak, else English).
    func ownerClock(_ request: Request, _ session: WebSession) async throws -> OwnerClock {
        ownerClock(request, try await store.preferences(owner: session.owner))
    }

    func ownerClock(_ request: Request, _ chosen: OwnerPreferences) -> OwnerClock {
        OwnerClock(timeZone: chosen.timeZone.flatMap(TimeZone.init(identifier:)),
                   language: chosen.language ?? Self.language(acceptLanguage: request.headers[.acceptLanguage]))
    }

    /// The first language of an `Accept-Language` header the cars speak (by primary subtag,
    /// ignoring q=0); nil if none.
    static func language(acceptLanguage: String?) -> String? {
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
}

/// Times as an owner reads them: in their zone, written the way their language writes dates.
struct OwnerClock: Sendable {
    var timeZone: TimeZone?
    var language: String?

    var isZoneChosen: Bool { timeZone != nil }

    func text(_ ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        var style = Date.FormatStyle(date: .abbreviated, time: .shortened, locale: Locale(identifier: language ?? "en"),
                                     timeZone: timeZone ?? TimeZone(identifier: "UTC")!)
        style = style.timeZone(.specificName(.short))
        return date.formatted(style)
    }
}
