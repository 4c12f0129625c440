import ConfigSupport
import Foundation
import Glibc
import GuidanceProtocol
@testable import GuidanceServer
import Logging
import Mustache
import NIOSSL
import TestSupport
import Testing

/// The impact mail's parts without a relay: the per-car rate (time passed in), the message (its
/// headers checked, its subject encoded, dot-stuffed), the clip's one-time mark, and the owner's
/// setting in the store.
@Suite struct ImpactMailTests {
    static let hour: UInt64 = 3600 * 1_000_000_000

    // MARK: - The rate

    @Test func atMostSoManyMailsPerCarInAnyHour() {
        var rate = ImpactMail.Rate(maxPerHour: 4)
        let t0: UInt64 = 5_000_000_000, minute: UInt64 = 60_000_000_000
        func admit(_ device: String, _ now: UInt64) -> Bool { rate.admit(device: device, now: now) }
        let first = (0..<4).map { admit("car-1", t0 + UInt64($0) * minute) }
        #expect(first == [true, true, true, true])
        #expect(!admit("car-1", t0 + 10 * minute), "the fifth within the hour")
        #expect(admit("car-2", t0 + 10 * minute), "another car has its own count")
        #expect(!admit("car-1", t0 + Self.hour - 1), "the first is still in the window")
        #expect(admit("car-1", t0 + Self.hour), "an hour after the first, one more")
        #expect(!admit("car-1", t0 + Self.hour + 1))
        #expect(admit("car-1", t0 + 2 * Self.hour + 3 * minute), "all but the newest have left the window")
    }

    @Test func refusedMailsDoNotCountAndForgottenCarsGo() {
        var rate = ImpactMail.Rate(maxPerHour: 1)
        func admit(_ device: String, _ now: UInt64) -> Bool { rate.admit(device: device, now: now) }
        #expect(admit("car-1", 0))
        let refused = (1..<100).map { admit("car-1", UInt64($0) * 1_000_000_000) }
        #expect(!refused.contains(true))
        #expect(admit("car-1", Self.hour), "refusals did not push the window on")
        for car in 0...ImpactMail.Rate.pruneAbove { _ = admit("old-\(car)", 2 * Self.hour) }
        _ = admit("new", 4 * Self.hour)
        #expect(rate.carsRemembered == 1, "cars with nothing in the window are forgotten")
    }

    // MARK: - The message

    static func settings(origin: String? = "https://cars.example.org") -> ImpactMail.Settings {
        .init(
            relay: .init(host: "relay.example.org", port: 587), from: "dashcam@example.org", startTLS: .whenOffered, credentials: nil,
            tls: TLSConfiguration.makeClientConfiguration(), timeout: .seconds(5), maxPerCarPerHour: 4, ehloName: "server",
            publicOrigin: origin)
    }

    static func job(label: String, gps: Bool = true, zone: String? = "Asia/Seoul", language: String? = "en") -> ImpactMail.Job {
        let clip = ClientMessage.Clip(
            id: "20261129T080230.822Z", kind: "parking", at: "2026-11-29T08:02:30.822Z", from: "2026-11-29T08:02:25.822Z",
            to: "2026-11-29T08:02:40.822Z", peakG: 2.41,
            files: [.init(name: "a.mp4", bytes: 10, sha256: String(repeating: "a", count: 64))],
            gps: gps ? [.init(t: "2026-11-29T08:02:30Z", mode: 3, lat: 37.5665, lon: 126.978)] : nil)
        return .init(
            device: "d1", clip: clip,
            recipient: .init(
                owner: 7, address: "ana@example.org", carName: label,
                clock: OwnerClock(timeZone: zone.flatMap(TimeZone.init(identifier:)), language: language)))
    }

    static func text(_ message: MailMessage) throws -> String {
        String(decoding: try message.rendered(), as: UTF8.self)
    }

    /// The body of a rendered message, decoded if it is base64.
    static func body(_ rendered: String) -> String {
        let parts = rendered.components(separatedBy: "\r\n\r\n")
        let body = parts.dropFirst().joined(separator: "\r\n\r\n")
        guard parts[0].contains("Content-Transfer-Encoding: base64") else { return body }
        return String(decoding: Data(base64Encoded: body.replacingOccurrences(of: "\r\n", with: "")) ?? Data(), as: UTF8.self)
    }

    /// RFC 2047 `B` encoded words back to text (what a mail program shows).
    static func decodedSubject(_ rendered: String) -> String {
        let header = rendered.components(separatedBy: "\r\n\r\n")[0]
        guard let start = header.range(of: "Subject: ") else { return "" }
        // The header and its folded lines (those that start with a space).
        var value = ""
        for (index, line) in header[start.upperBound...].components(separatedBy: "\r\n").enumerated() {
            guard index == 0 || line.hasPrefix(" ") else { break }
            value += line
        }
        let words = value.split(separator: " ")
        guard words.allSatisfy({ $0.hasPrefix("=?UTF-8?B?") && $0.hasSuffix("?=") }) else { return value }
        return words.map { word in
            String(decoding: Data(base64Encoded: String(word.dropFirst(10).dropLast(2))) ?? Data(), as: UTF8.self)
        }.joined()
    }

    @Test func theMailSaysWhichCarWhenWhereHowHardAndLinksTheEvent() throws {
        let rendered = try Self.text(
            ImpactMail.message(Self.job(label: "Blue Kona"), settings: Self.settings(), date: Date(timeIntervalSince1970: 0)))
        #expect(rendered.contains("\r\nSubject: Impact on your parked car Blue Kona\r\n"))
        #expect(rendered.hasPrefix("From: dashcam@example.org\r\nTo: ana@example.org\r\n"))
        #expect(rendered.contains("Date: Thu, 01 Jan 1970 00:00:00 +0000\r\n"))
        #expect(rendered.contains("Content-Type: text/plain; charset=utf-8\r\n"))
        let body = Self.body(rendered)
        #expect(body.contains("Your car Blue Kona recorded an impact while it was parked."))
        #expect(body.contains("When: Nov 29, 2026") && body.contains("5:02"), "in the owner's zone (Seoul, UTC+9): \(body)")
        #expect(body.contains("Peak: 2.4 g"))
        #expect(
            body.contains(
                "Where: 37.56650, 126.97800 (https://www.openstreetmap.org/?mlat=37.56650&mlon=126.97800#map=17/37.56650/126.97800)"))
        #expect(body.contains("See the recording: https://cars.example.org/events/d1/20261129T080230.822Z\r\n"))
        let bare = rendered.replacingOccurrences(of: "\r\n", with: "")
        #expect(!bare.contains("\r") && !bare.contains("\n"), "every line ends in CRLF, and nothing else does")

        let nowhere = Self.body(
            try Self.text(ImpactMail.message(Self.job(label: "Kona", gps: false), settings: Self.settings(origin: nil), date: Date())))
        #expect(!nowhere.contains("Where:"), "no GPS, no place")
        #expect(nowhere.contains("See the recording: /events/d1/20261129T080230.822Z"))
    }

    @Test func aNameInAnotherScriptIsEncodedInTheSubjectAndTheBody() throws {
        let name = "아빠의 차 — 🚗 ünïcödé, the family's second car"
        let rendered = try Self.text(ImpactMail.message(Self.job(label: name, language: "ko"), settings: Self.settings(), date: Date()))
        let ascii = rendered.unicodeScalars.allSatisfy { $0.isASCII }
        #expect(ascii, "7-bit on the wire")
        #expect(Self.decodedSubject(rendered) == "Impact on your parked car " + name)
        let subject = rendered.components(separatedBy: "\r\n").drop { !$0.hasPrefix("Subject: ") }.prefix {
            $0.hasPrefix("Subject: ") || $0.hasPrefix(" ")
        }
        #expect(subject.count > 1 && subject.allSatisfy { $0.utf8.count <= 78 }, "folded, each line short: \(Array(subject))")
        #expect(rendered.contains("Content-Transfer-Encoding: base64"))
        #expect(Self.body(rendered).contains("Your car \(name) recorded"))
    }

    /// A car's name comes from the car (or its owner): a line end in it could add a header or a
    /// recipient. It is cleaned for the subject, and the message refuses any that gets through.
    @Test func noHeaderValueFromOutsideCarriesALineEnd() throws {
        let rendered = try Self.text(
            ImpactMail.message(Self.job(label: "Kona\r\nBcc: eve@example.org\nX: y"), settings: Self.settings(), date: Date()))
        #expect(!rendered.contains("\r\nBcc:") && !rendered.contains("\nX:"))
        #expect(rendered.contains("Subject: Impact on your parked car Kona  Bcc: eve@example.org X: y\r\n"))
        #expect(ImpactMail.carName("\u{7}\r\n", device: "d\n1") == "d_1", "nothing left: the device id, cleaned too")

        let good = MailMessage(from: "dashcam@example.org", to: "ana@example.org", subject: "s", body: "b", date: Date(), id: "1")
        for (field, value) in [
            ("to", "ana@example.org\r\nBcc: eve@example.org"), ("to", "ana@example.org>"), ("from", "a b@example.org"),
            ("subject", "hi\r\nBcc: eve@example.org"), ("subject", "tab\there"), ("to", "ana"), ("to", "@example.org"),
            ("to", "ana@"), ("to", "ana@b@example.org"), ("to", "아나@example.org")
        ] {
            var bad = good
            switch field {
            case "to": bad.to = value
            case "from": bad.from = value
            default: bad.subject = value
            }
            #expect(throws: MailMessage.Refused.self, "\(field): \(value.debugDescription)") { try bad.rendered() }
        }
        #expect(MailMessage.isAddress("ana.b+cars@sub.example.org"))
    }

    @Test func linesThatStartWithADotAreStuffedAndTheMessageEnds() {
        #expect(MailMessage.data(Array(".a\r\nb\r\n..c\r\n.\r\n".utf8)) == Array("..a\r\nb\r\n...c\r\n..\r\n.\r\n".utf8))
        #expect(MailMessage.data(Array("no end".utf8)) == Array("no end\r\n.\r\n".utf8))
        #expect(MailMessage.data([]) == Array(".\r\n".utf8))
    }

    @Test func theEventLinkEscapesTheDevice() {
        #expect(ImpactMail.eventPath(device: "car 1/x", id: "c1") == "/events/car%201%2Fx/c1")
    }

    // MARK: - Once per clip

    @Test func aClipIsMarkedToldOnceAcrossStoresOnOneFolder() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("clips-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let one = FileClipStore(root: root.path), other = FileClipStore(root: root.path)
        let clip = Self.job(label: "x").clip
        #expect(try !one.claimNotice(device: "d1", id: clip.id), "a clip not kept is not marked")
        _ = try one.announce(clip, device: "d1", now: Date())
        // Asked at once by sessions of several instances (two stores on one folder): one makes the mark.
        let made = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<16 {
                let store = index.isMultiple(of: 2) ? one : other
                group.addTask { (try? store.claimNotice(device: "d1", id: clip.id)) ?? false }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(made.filter { $0 }.count == 1)
        #expect(try !other.claimNotice(device: "d1", id: clip.id))
        #expect(try one.clip(device: "d1", id: clip.id)?.clip == clip, "the mark is no file of the clip")
        #expect(try !one.claimNotice(device: "d1", id: "../d1"))
        // Deleted by its owner and announced again by the car: told once all the same.
        #expect(try one.delete(device: "d1", id: clip.id))
        _ = try one.announce(clip, device: "d1", now: Date())
        #expect(try !other.claimNotice(device: "d1", id: clip.id), "a deleted clip announced again is not told twice")
        // The marks go with retention.
        _ = try one.expire(before: Date().addingTimeInterval(60))
        _ = try one.announce(clip, device: "d1", now: Date())
        #expect(try one.claimNotice(device: "d1", id: clip.id), "a mark past retention is gone")
    }

    // MARK: - Configuration

    /// The relay's password and CA files are configuration (exit 78 at start), read whether or
    /// not there is anyone to mail; without owners (pairing off) there is no mail, and the log says why.
    @Test func theRelaysFilesAreCheckedAtStart() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let password = folder.appendingPathComponent("password").path
        try "secret\n".write(toFile: password, atomically: true, encoding: .utf8)
        chmod(password, 0o644)
        let notPEM = folder.appendingPathComponent("ca.pem").path
        try "not a certificate\n".write(toFile: notPEM, atomically: true, encoding: .utf8)
        var config = ServerConfig()
        config.mail.relay = "127.0.0.1:25"
        config.mail.from = "dashcam@example.org"
        config.mail.username = "ana"
        config.mail.passwordFile = password
        let lines = LogLines()
        #expect(throws: ConfigError.self) { try config.makeImpactMail(clips: nil, pairing: nil, logger: lines.logger) }
        do { _ = try config.makeImpactMail(clips: nil, pairing: nil, logger: lines.logger) } catch {
            #expect(error.key == "mail.passwordFile" && error.description.contains("chmod 600"), "\(error)")
        }
        chmod(password, 0o600)
        config.mail.caFile = notPEM
        do { _ = try config.makeImpactMail(clips: nil, pairing: nil, logger: lines.logger) } catch {
            #expect(error.key == "mail.caFile" && error.description.contains("PEM"), "\(error)")
        }
        config.mail.caFile = nil
        #expect(try config.makeImpactMail(clips: nil, pairing: nil, logger: lines.logger) == nil)
        #expect(lines.count(containing: "pairing.enabled is not") == 1)
    }

    // MARK: - The owner's choice

    /// The box is usable only where the server has a relay; otherwise the page says why.
    @Test func theSettingsPageOffersTheMailOnlyWithARelay() async throws {
        let library = try await OwnerTemplates.library()
        let base: [String: Any] = [
            "t": PageText.english.lambda, "title": "Settings", "csrf": "c", "signedIn": true, "now": "now", "zones": [], "languages": [],
            "address": "ana@example.org"
        ]
        let off = try #require(library.render(base.merging(["mailRelay": false, "impactMail": true]) { $1 }, withTemplate: "settings"))
        #expect(off.contains(#"<input type="checkbox" id="impactMail" name="impactMail" value="on" checked disabled>"#), "\(off)")
        #expect(off.contains(#"<label for="impactMail">E-mail me when a parked car of mine records an impact</label>"#))
        #expect(off.contains("has not set up e-mail") && !off.contains("ana@example.org"))
        let on = try #require(library.render(base.merging(["mailRelay": true, "impactMail": false]) { $1 }, withTemplate: "settings"))
        #expect(on.contains(#"<input type="checkbox" id="impactMail" name="impactMail" value="on">"#), "\(on)")
        #expect(on.contains("(to ana@example.org)") && !on.contains("has not set up e-mail"))
    }

    @Test func theOwnersChoiceIsKeptBesideTheirOtherSettings() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("prefs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("usage.sqlite").path
        let ledger = try await SQLiteLedger.open(path: path, logger: Logger(label: "ledger"))
        let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing"))
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: 1)
        let before = try await store.preferences(owner: owner)
        try await store.setPreferences(owner: owner, OwnerPreferences(timeZone: "Asia/Seoul", language: "ko", impactMail: true))
        let after = try await store.preferences(owner: owner)
        try await store.setPreferences(owner: owner, OwnerPreferences(timeZone: "Asia/Seoul", language: "ko", impactMail: false))
        let off = try await store.preferences(owner: owner)
        try await store.shutdown()
        try await ledger.shutdown()
        #expect(before == OwnerPreferences() && !before.impactMail, "off until the owner turns it on")
        #expect(after == OwnerPreferences(timeZone: "Asia/Seoul", language: "ko", impactMail: true))
        #expect(!off.impactMail)
    }
}
