import Foundation
import GuidanceProtocol
import GuidanceServer
import Testing
import TestSupport

/// The owners' side of the release server attacked the way an outside audit did, from loopback,
/// through the real pages (curl with a cookie jar): codes guessed at every route that takes one,
/// passwords and links, sessions after a reset, a copied refresh token, markup in names, the
/// simulated provider's checkout. Each test is one finding of that audit and what the owner or
/// the car would notice.
@Suite(.serialized) struct OwnerSiteAttackTests {
    static let password = "correct horse battery"

    /// A server with pairing and the simulated provider, its own signing key and webhook secret.
    static func server(extra: String = "") async throws -> ServerProcess {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("owners-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return try await ServerProcess(
            extra: """
                pairing:
                  enabled: true
                  signingKeyFile: \(folder.path)/signing.key
                payments:
                  provider: simulated
                  products: ["1 hour=3600=4.99 EUR"]
                  webhookSecretFile: \(folder.path)/webhook.secret
                usage:
                  remainingSeconds: 600
                \(extra)
                """, folder: folder)
    }

    /// `guidance-server owner add EMAIL`: the one-time link it prints.
    static func ownerLink(_ server: ServerProcess, _ email: String, name: String = "Ana") async throws -> String {
        let result = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("guidance-server").path,
            ["owner", "add", email, "--name", name, "--config", server.folder.appendingPathComponent("server.yaml").path])
        try #require(result.status == 0, "owner add: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// An owner with a password, signed in from `address`.
    static func signedIn(_ server: ServerProcess, _ email: String, address: String, name: String = "Ana") async throws -> OwnerBrowser {
        let browser = OwnerBrowser(port: server.port, address: address)
        let set = try await browser.setPassword(link: try await ownerLink(server, email, name: name), password)
        try #require(set.status == 200, "set-password: \(set.status) \(set.body)")
        let signed = try await browser.signIn(email, password)
        try #require(signed.status == 303, "sign-in: \(signed.status) \(signed.body)")
        return browser
    }

    /// A car that asked for a code: its device code and the code it says.
    static func waitingCar(_ server: ServerProcess, name: String = "Ana's van") async throws -> (deviceCode: String, userCode: String) {
        let started = try await PairingSystemTests.post(
            server.port, "/oauth/device_authorization",
            ["client_id": "dashcam-agent", "device_name": name])
        return (try #require(started.json["device_code"] as? String), try #require(started.json["user_code"] as? String))
    }

    static func poll(_ server: ServerProcess, _ deviceCode: String) async throws -> PairingSystemTests.Answer {
        try await PairingSystemTests.post(
            server.port, "/oauth/token",
            [
                "client_id": "dashcam-agent", "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": deviceCode
            ])
    }

    /// A code nobody has: nine digits that differ from `code`.
    static func wrongCode(_ i: Int, not code: String) -> String {
        let guess = String(format: "%09d", (i * 7_919 + 1) % 1_000_000_000)
        return guess == code ? String(format: "%09d", (i * 7_919 + 2) % 1_000_000_000) : guess
    }

    /// A car's name reaches the approval page without direction overrides, isolates, invisible
    /// format characters or controls: a name cannot make the page show the owner other text than
    /// the car sent.
    @Test func aCarsNameCannotReorderTheApprovalPage() async throws {
        let server = try await Self.server()
        let car = try await Self.waitingCar(server, name: "Ana\u{202E}nav\u{2066}x\u{2069}\u{200B}\u{0007}end")
        let owner = try await Self.signedIn(server, "ana@example.org", address: "198.51.100.20")
        let pair = try await owner.get("/pair")
        let page = try await owner.submit("/pair", from: pair, ["code": car.userCode])
        #expect(page.status == 200, "\(page.status)")
        #expect(page.body.contains("Ananavx end"), "\(page.body)")
        #expect(!page.body.unicodeScalars.contains { [0x202E, 0x2066, 0x2069, 0x200B, 0x07].contains($0.value) })
    }

    /// Audit finding 2: after the wrong-code limit on `/pair`, `/pair/decide` kept taking guesses
    /// (200 answered 410, none logged) and then approved a stranger's car. Now every route that
    /// takes a code counts against the same limits, and only a code this owner looked up can be
    /// decided: a decision on anyone else's code is a wrong guess against it, and after three the
    /// code is locked (the car is refused and offers a new one).
    @Test func codesAreLimitedAtEveryRouteThatTakesOneAndAStrangersCarIsNotApproved() async throws {
        let server = try await Self.server()
        let victim = try await Self.waitingCar(server, name: "victim's car")
        let attacker = try await Self.signedIn(server, "mallory@example.org", address: "198.51.100.7", name: "Mallory")
        let pair = try await attacker.get("/pair")
        var statuses: [Int] = []
        for i in 0..<6 {
            statuses.append(try await attacker.submit("/pair", from: pair, ["code": Self.wrongCode(i, not: victim.userCode)]).status)
        }
        #expect(statuses == [400, 400, 400, 400, 400, 429], "\(statuses)")
        // The same account at the other route: limited as well, not answered 410 ever after.
        var decided: [Int] = []
        for i in 6..<12 {
            decided.append(
                try await attacker.submit(
                    "/pair/decide", from: pair, ["code": Self.wrongCode(i, not: victim.userCode), "decision": "approve"]
                ).status)
        }
        #expect(decided.allSatisfy { $0 == 429 }, "\(decided)")
        #expect(try await attacker.submit("/pair/decide", from: pair, ["code": victim.userCode, "decision": "approve"]).status == 429)

        // A fresh account and address, the victim's code known to it (said aloud in the car):
        // deciding a code it never looked up is a guess against that code, and it is not approved.
        let other = try await Self.signedIn(server, "eve@example.org", address: "198.51.100.8", name: "Eve")
        let otherPair = try await other.get("/pair")
        for _ in 0..<3 {
            let answer = try await other.submit("/pair/decide", from: otherPair, ["code": victim.userCode, "decision": "approve"])
            #expect(answer.status == 400 || answer.status == 410, "\(answer.status)")
        }
        // Locked: the car is told it was refused, and never gets the attacker's credentials.
        let polled = try await Self.poll(server, victim.deviceCode)
        #expect(polled.json["access_token"] == nil)
        #expect(polled.json["error"] as? String == "access_denied", "\(polled.json)")
        // The wrong guesses were logged, by hash: never the code itself.
        #expect(server.process.stderr.contains("did not match"))
        #expect(!server.process.stderr.contains(victim.userCode))
    }

    /// The owner's own way still works: look the code up, approve it, the car gets credentials
    /// with the owner's name.
    @Test func theOwnerWhoLookedTheCodeUpApprovesIt() async throws {
        let server = try await Self.server()
        let car = try await Self.waitingCar(server)
        let owner = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.10")
        let pair = try await owner.get("/pair")
        let approve = try await owner.submit("/pair", from: pair, ["code": car.userCode])
        #expect(approve.status == 200 && approve.body.contains("Ana&#39;s van"), "\(approve.status) \(approve.body)")
        // Someone who overheard the code, looking it up after her: refused, and the code stays hers.
        let overheard = try await Self.signedIn(server, "pam@example.org", address: "192.0.2.11", name: "Pam")
        #expect(try await overheard.submit("/pair", from: try await overheard.get("/pair"), ["code": car.userCode]).status == 400)
        let done = try await owner.submit("/pair/decide", from: approve, ["code": car.userCode, "decision": "approve"])
        #expect(done.status == 200, "\(done.body)")
        let polled = try await Self.poll(server, car.deviceCode)
        #expect(polled.json["owner_name"] as? String == "Ana", "\(polled.json)")
    }

    /// Audit finding 3: sign-in had no throttle (20 wrong passwords, then the right one, all
    /// answered). Now tries are counted per account and per address before the password is
    /// checked; past the limit the answer is 429 for a known and an unknown address alike.
    @Test func signInIsThrottledPerAccountAndPerAddressAlike() async throws {
        let server = try await Self.server()
        _ = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.20")
        let attacker = OwnerBrowser(port: server.port, address: "203.0.113.5")
        var statuses: [Int] = []
        for i in 0..<12 { statuses.append(try await attacker.signIn("ana@example.org", "wrong password \(i)").status) }
        #expect(statuses.prefix(10).allSatisfy { $0 == 401 } && statuses.suffix(2).allSatisfy { $0 == 429 }, "\(statuses)")
        // The right password from the same attacker is refused too while the account is limited.
        #expect(try await attacker.signIn("ana@example.org", Self.password).status == 429)
        // An address without an account answers the same way at the same count: nothing to enumerate.
        let prober = OwnerBrowser(port: server.port, address: "203.0.113.6")
        var unknown: [Int] = []
        for i in 0..<12 { unknown.append(try await prober.signIn("nobody@example.org", "wrong password \(i)").status) }
        #expect(unknown == statuses, "\(unknown) against \(statuses)")
        // Without a valid link no password is hashed at all (bcrypt runs only after the cheap checks).
        let before = try await Self.hashes(server)
        let stranger = OwnerBrowser(port: server.port, address: "203.0.113.9")
        for i in 0..<4 {
            let form = try await stranger.get("/set-password?token=forged\(i)")
            let answer = try await stranger.submit(
                "/set-password", from: form, ["token": "forged\(i)", "password": Self.password, "again": Self.password])
            #expect(answer.status == 410, "\(answer.status)")
        }
        #expect(try await Self.hashes(server) == before)
    }

    /// The server's count of bcrypt hashes made or checked.
    static func hashes(_ server: ServerProcess) async throws -> Int {
        let metrics = try await Command.executeAsync("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(server.port)/metrics"]).stdout
        let line = metrics.split(separator: "\n").first { $0.hasPrefix("guidance_password_hashes_total") } ?? ""
        return Int(Double(line.split(separator: " ").last ?? "") ?? -1)
    }

    /// Audit finding 4: a reset kept old sessions and old links working. Now setting a password
    /// ends every session of that owner and spends every other link.
    @Test func aPasswordResetEndsEverySessionAndEveryOtherLink() async throws {
        let server = try await Self.server()
        let old = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.30")
        #expect(try await old.get("/").status == 200)
        let older = try await Self.ownerLink(server, "ana@example.org")
        let newest = try await Self.ownerLink(server, "ana@example.org")
        let reset = OwnerBrowser(port: server.port, address: "192.0.2.31")
        #expect(try await reset.setPassword(link: newest, "a brand new password").status == 200)
        // The old session is gone: My cars sends it to sign in.
        let after = try await old.get("/")
        #expect(after.status == 303 && after.location == "/signin", "\(after.status) \(after.headers)")
        // The older link is spent, and the old password no longer signs in.
        #expect(try await reset.setPassword(link: older, "an attacker's password").status == 410)
        #expect(try await reset.signIn("ana@example.org", "an attacker's password").status == 401)
        #expect(try await reset.signIn("ana@example.org", "a brand new password").status == 303)
    }

    /// A session holds a stamp of the password it was signed in with: one whose owner's password
    /// changed by any way (here behind the pages' back, as a sign-in racing a reset would leave
    /// it) is over at its next request.
    @Test func aSessionEndsWhenItsOwnersPasswordIsNoLongerTheOneItSignedInWith() async throws {
        let server = try await Self.server()
        let browser = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.32")
        #expect(try await browser.get("/").status == 200)
        let changed = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE owners SET password_hash = '$2b$12$' || hex(randomblob(26))\"); c.commit()",
                server.folder.appendingPathComponent("usage.sqlite").path
            ])
        try #require(changed.status == 0, "\(changed.stderr)")
        let after = try await browser.get("/")
        #expect(after.status == 303 && after.location == "/signin", "\(after.status)")
    }

    /// Finding 10: an owner sees their sessions and ends one; the session id is stored hashed.
    @Test func anOwnerSeesAndEndsTheirSessionsWhoseIdsAreStoredHashed() async throws {
        let server = try await Self.server()
        let laptop = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.40")
        let phone = OwnerBrowser(port: server.port, address: "192.0.2.41")
        #expect(try await phone.signIn("ana@example.org", Self.password).status == 303)
        let list = try await laptop.get("/sessions")
        #expect(list.status == 200)
        let items = list.body.components(separatedBy: "<li class=\"session\">").dropFirst()
        #expect(items.count == 2, "\(list.body)")
        #expect(items.filter { $0.contains("(this browser)") }.count == 1)
        // Ending the other one: the phone is signed out, the laptop is not.
        let other = try #require(items.first { !$0.contains("(this browser)") })
        let start = try #require(other.range(of: "action=\""))
        let action = String(other[start.upperBound...].prefix { $0 != "\"" })
        #expect(try await laptop.submit(action, from: list, [:]).status == 303)
        #expect(try await phone.get("/").status == 303)
        #expect(try await laptop.get("/").status == 200)
        // The database never holds the cookie's value.
        let cookie = try #require(laptop.sessionCookie)
        let dump = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3,sys; print([r[0] for r in sqlite3.connect(sys.argv[1]).execute('SELECT key FROM web_sessions')])",
                server.folder.appendingPathComponent("usage.sqlite").path
            ])
        #expect(dump.status == 0 && !dump.stdout.contains(cookie), "\(dump.stdout) \(dump.stderr)")
        // The ledger file was made private to the server's user.
        let mode =
            try FileManager.default.attributesOfItem(atPath: server.folder.appendingPathComponent("usage.sqlite").path)[.posixPermissions]
            as? NSNumber
        #expect(mode?.intValue == 0o600)
    }

    /// Audit finding 5: a copy of a spent refresh token presented within the retry window got a
    /// new successor, and the car's own successor was then refused: the car locked out, the copy
    /// working, nobody told. Now a retry returns the same successor, so the car keeps working;
    /// whoever presents a spent token later revokes the whole family.
    @Test func aCopiedRefreshTokenNeverLocksTheCarOut() async throws {
        let server = try await Self.server()
        let car = try await Self.waitingCar(server)
        let owner = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.50")
        let approve = try await owner.submit("/pair", from: try await owner.get("/pair"), ["code": car.userCode])
        #expect(try await owner.submit("/pair/decide", from: approve, ["code": car.userCode, "decision": "approve"]).status == 200)
        let r0 = try #require(try await Self.poll(server, car.deviceCode).json["refresh_token"] as? String)
        func refresh(_ token: String) async throws -> PairingSystemTests.Answer {
            try await PairingSystemTests.post(
                server.port, "/oauth/token",
                ["client_id": "dashcam-agent", "grant_type": "refresh_token", "refresh_token": token])
        }
        let carAnswer = try await refresh(r0)
        let r1 = try #require(carAnswer.json["refresh_token"] as? String)
        let copyAnswer = try await refresh(r0)
        #expect(copyAnswer.status == 200)
        #expect(copyAnswer.json["refresh_token"] as? String == r1, "a retry must get the same successor")
        // The car goes on with its own successor.
        let next = try await refresh(r1)
        #expect(next.status == 200, "\(next.json)")
        let r2 = try #require(next.json["refresh_token"] as? String)
        let access = try #require(next.json["access_token"] as? String)
        #expect(try RawClient(port: server.port).upgrade(token: access).status == 101)
        // A spent token whose successor was used is reuse: the family is revoked for everyone,
        // the car unpaired (its access tokens refused from then on), and the log says so.
        #expect(try await refresh(r0).json["error"] as? String == "invalid_grant")
        #expect(try await refresh(r2).json["error"] as? String == "invalid_grant")
        #expect(try RawClient(port: server.port).upgrade(token: access).status == 401)
        #expect(try await owner.get("/").body.contains("No car is paired"))
        #expect(server.process.stderr.contains("used again"))
    }

    /// Audit finding 6: a quote followed by a combining mark is one Swift `Character`, which the
    /// template escaper left raw. A car's name, an owner's rename and a reflected link token each
    /// come out escaped, scalar by scalar.
    @Test func markupInNamesAndLinksIsEscapedScalarByScalar() async throws {
        let server = try await Self.server()
        let hostile = "x\"\u{0301} autofocus onfocus=alert(1) '\u{0301}<\u{0301}b>\u{0301}&\u{0301}"
        let car = try await Self.waitingCar(server, name: hostile)
        let owner = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.60")
        let approve = try await owner.submit("/pair", from: try await owner.get("/pair"), ["code": car.userCode])
        Self.expectEscaped(approve.body)
        #expect(approve.body.contains("&quot;\u{0301} autofocus"))
        _ = try await owner.submit("/pair/decide", from: approve, ["code": car.userCode, "decision": "approve"])
        let device = try #require(try await Self.poll(server, car.deviceCode).json["device_id"] as? String)
        let cars = try await owner.get("/")
        Self.expectEscaped(cars.body)
        let renamed = try await owner.submit("/devices/\(device)/rename", from: cars, ["label": hostile])
        #expect(renamed.status == 200)
        Self.expectEscaped(renamed.body)
        let reflected = try await OwnerBrowser(port: server.port).get("/set-password?token=" + OwnerBrowser.encode(hostile))
        Self.expectEscaped(reflected.body)
    }

    /// No `"`, `'` or `<` scalar sits right before a combining mark: the hostile value's quote
    /// and bracket scalars all came out as entities.
    static func expectEscaped(_ body: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let scalars = Array(body.unicodeScalars)
        for (index, scalar) in scalars.enumerated().dropLast() where "\"'<>&".unicodeScalars.contains(scalar) {
            #expect(scalars[index + 1] != "\u{0301}", "raw \(scalar) before a combining mark in: \(body)", sourceLocation: sourceLocation)
        }
    }

    /// Audit finding 8: anyone with a checkout URL pressed Pay and a car gained 10 hours. Now the
    /// checkout is the buying owner's alone.
    @Test func theSimulatedCheckoutIsTheBuyingOwnersAlone() async throws {
        let server = try await Self.server()
        let car = try await Self.waitingCar(server)
        let owner = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.70")
        let approve = try await owner.submit("/pair", from: try await owner.get("/pair"), ["code": car.userCode])
        _ = try await owner.submit("/pair/decide", from: approve, ["code": car.userCode, "decision": "approve"])
        let device = try #require(try await Self.poll(server, car.deviceCode).json["device_id"] as? String)
        let buy = try await owner.get("/buy?device=\(device)")
        let started = try await owner.submit("/buy", from: buy, ["device": device, "product": "0"])
        let checkout = try #require(started.location, "\(started.status) \(started.headers)")
        // A stranger with the URL: sent to sign in; pressing Pay does nothing.
        let stranger = OwnerBrowser(port: server.port, address: "203.0.113.70")
        #expect(try await stranger.get(checkout).status == 303)
        let strangerPay = try await stranger.post(checkout, ["decision": "pay", "csrf": "x"])
        #expect(strangerPay.status == 303 && strangerPay.location == "/signin")
        // Another owner, signed in: not theirs.
        let other = try await Self.signedIn(server, "bo@example.org", address: "192.0.2.71", name: "Bo")
        let otherPage = try await other.get(checkout)
        #expect(otherPage.status == 404)
        #expect(try await other.submit(checkout, from: try await other.get("/"), ["decision": "pay"]).status == 404)
        #expect(try await owner.get("/").body.contains("10 min"), "no credit yet: the 600 s every car starts with")
        // The buyer pays: credited once, by the webhook.
        let page = try await owner.get(checkout)
        #expect(page.status == 200)
        #expect(try await owner.submit(checkout, from: page, ["decision": "pay"]).status == 303)
        #expect(try await owner.get("/").body.contains("1 h 10 min"))
    }

    /// The events pages: a car's clip is its owner's alone. A stranger is sent to sign in,
    /// another owner finds nothing (the same 404 as for a clip that does not exist) and cannot
    /// delete it, a forged form is refused, and the owner gets a seek answered 206.
    @Test func anEventIsItsOwnersAlone() async throws {
        let clips = FileManager.default.temporaryDirectory.appendingPathComponent("clips-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: clips) }
        let server = try await Self.server(extra: "clips:\n  dir: \(clips.path)")
        let car = try await Self.waitingCar(server)
        let owner = try await Self.signedIn(server, "ana@example.org", address: "192.0.2.80")
        let approve = try await owner.submit("/pair", from: try await owner.get("/pair"), ["code": car.userCode])
        _ = try await owner.submit("/pair/decide", from: approve, ["code": car.userCode, "decision": "approve"])
        let device = try #require(try await Self.poll(server, car.deviceCode).json["device_id"] as? String)
        // The car's upload, as the store takes it from a session.
        let bytes = [UInt8]((0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let store = FileClipStore(root: clips.path)
        let clip = ClientMessage.Clip(
            id: "incident-1", kind: "incident", at: "2026-11-29T08:02:30.822Z", from: "2026-11-29T08:02:20.822Z",
            to: "2026-11-29T08:02:40.822Z", peakG: 2.4,
            files: [.init(name: "000001-20261129T080220.822Z.mp4", bytes: bytes.count, sha256: sha256Hex(bytes))],
            gps: [.init(t: "2026-11-29T08:02:30Z", mode: 3, lat: 48.85837, lon: 2.29448)])
        _ = try store.announce(clip, device: device, now: Date())
        _ = try store.append(.init(id: clip.id, name: clip.files[0].name, offset: 0, bytes: bytes.count), Data(bytes), device: device)
        let event = "/events/\(device)/\(clip.id)", file = "/events/\(device)/\(clip.id)/files/\(clip.files[0].name)"

        let list = try await owner.get("/events")
        #expect(
            list.status == 200 && list.body.contains(event) && list.body.contains("48.85837, 2.29448") && list.body.contains("2.4 g"),
            "\(list.body)")
        #expect(list.body.contains("https://www.openstreetmap.org/?mlat=48.85837&amp;mlon=2.29448"), "the map link, escaped")
        let page = try await owner.get(event)
        #expect(page.status == 200 && page.header("Content-Security-Policy").first?.contains("media-src 'self'") == true)
        let seek = try await owner.get(file, headers: ["Range: bytes=1000-1999"])
        #expect(seek.status == 206 && seek.header("Content-Range") == ["bytes 1000-1999/5000"], "\(seek.status) \(seek.headers)")

        let stranger = OwnerBrowser(port: server.port, address: "203.0.113.80")
        for path in ["/events", event, file] { #expect(try await stranger.get(path).status == 303, "\(path)") }
        #expect(try await stranger.post(event + "/delete", ["csrf": "x"]).location == "/signin")
        let other = try await Self.signedIn(server, "bo@example.org", address: "192.0.2.81", name: "Bo")
        let othersEvents = try await other.get("/events")
        #expect(othersEvents.status == 200 && !othersEvents.body.contains(clip.id))
        for path in [event, file, "/events/\(device)/incident-2", "/events/\(device)/..%2F..%2Fetc/files/passwd"] {
            #expect(try await other.get(path).status == 404, "\(path)")
        }
        #expect(try await other.submit(event + "/delete", from: try await other.get("/events"), [:]).status == 404)
        #expect(try await other.submit(event + "/share", from: try await other.get("/events"), ["days": "30"]).status == 404)

        // A link for someone without an account: the clip and nothing else, until revoked.
        let shared = try await owner.submit(event + "/share", from: page, ["days": "7"])
        let link = try #require(
            shared.body.components(separatedBy: "class=\"share-link\" readonly value=\"").dropFirst().first?
                .split(separator: "\"").first.map(String.init), "\(shared.body)")
        let path = String(link[try #require(link.range(of: "/shared/")).lowerBound...])
        let insurer = OwnerBrowser(port: server.port, address: "198.51.100.80")
        let seen = try await insurer.get(path)
        #expect(
            seen.status == 200 && seen.body.contains(path + "/files/") && !seen.body.contains("Ana") && !seen.body.contains("/events"),
            "\(seen.body)")
        let fileName = clip.files[0].name
        #expect(try await insurer.get(path + "/files/" + fileName, headers: ["Range: bytes=0-9"]).status == 206)
        let token = String(path.dropFirst("/shared/".count))
        let tampered = "/shared/" + String(token.prefix(10)) + (token.dropFirst(10).first == "A" ? "B" : "A") + String(token.dropFirst(11))
        #expect(try await insurer.get(tampered).status == 404)
        let revoke = try #require(
            shared.body.components(separatedBy: "action=\"").dropFirst().map { $0.split(separator: "\"")[0] }
                .first { $0.hasSuffix("/revoke") }.map(String.init))
        #expect(try await other.submit(revoke, from: try await other.get("/events"), [:]).status == 404, "not another owner's to revoke")
        #expect(try await insurer.get(path).status == 200)
        #expect(try await owner.submit(revoke, from: shared, [:]).status == 200)
        let (revokedPage, revokedFile) = (try await insurer.get(path), try await insurer.get(path + "/files/" + fileName))
        #expect(revokedPage.status == 404 && revokedFile.status == 404, "revoked")
        #expect(try await owner.post(event + "/delete", ["csrf": "forged"]).status == 403)
        #expect(try store.clips(device: device).count == 1, "neither deleted it")
        // A second clip's link, made before the car is unpaired (below).
        var second = clip
        second.id = "incident-2"
        _ = try store.announce(second, device: device, now: Date())
        _ = try store.append(.init(id: second.id, name: second.files[0].name, offset: 0, bytes: bytes.count), Data(bytes), device: device)
        let secondPage = try await owner.get("/events/\(device)/incident-2")
        let beforeUnpair = try await owner.submit("/events/\(device)/incident-2/share", from: secondPage, ["days": "30"])
        let lastLink = try #require(
            beforeUnpair.body.components(separatedBy: "class=\"share-link\" readonly value=\"").dropFirst().first?
                .split(separator: "\"").first.map(String.init), "\(beforeUnpair.body)")
        let lastPath = String(lastLink[try #require(lastLink.range(of: "/shared/")).lowerBound...])
        #expect(try await insurer.get(lastPath).status == 200)
        // A Host header with more than a host name in it does not make the link point elsewhere.
        let tricked = try await owner.get("/events/\(device)/incident-2", headers: ["Host: 127.0.0.1:1@evil.example"])
        #expect(!tricked.body.contains("evil.example/shared") && tricked.body.contains("value=\"/shared/"), "\(tricked.body)")

        let deleted = try await owner.submit(event + "/delete", from: page, [:])
        #expect(deleted.status == 200 && deleted.body.contains("were deleted"))
        let gone = try await owner.get(file)
        #expect(try store.clips(device: device).map(\.clip.id) == ["incident-2"] && gone.status == 404)
        // Unpaired, the car's links are over: its owner could no longer revoke them.
        #expect(try await owner.submit("/devices/\(device)/unpair", from: try await owner.get("/"), [:]).status == 200)
        #expect(try await insurer.get(lastPath).status == 404, "unpaired: its links are over")
    }

    /// Audit finding 9: bcrypt reads 72 bytes up to the first NUL, and the length rule counted
    /// characters. Passwords bcrypt would cut are refused, with why.
    @Test func passwordsThatBcryptWouldCutAreRefused() async throws {
        let server = try await Self.server()
        let link = try await Self.ownerLink(server, "ana@example.org")
        let browser = OwnerBrowser(port: server.port, address: "192.0.2.80")
        let withNul = try await browser.setPassword(link: link, "abc\u{0}defghijkl")
        #expect(withNul.status == 400 && withNul.body.contains("72 bytes"), "\(withNul.status)")
        let long = try await browser.setPassword(link: link, String(repeating: "é", count: 40))
        #expect(long.status == 400, "80 bytes: \(long.status)")
        let fits = String(repeating: "é", count: 36)
        #expect(try await browser.setPassword(link: link, fits).status == 200)
        #expect(try await browser.signIn("ana@example.org", fits).status == 303)
        // What bcrypt would have cut off no longer signs in either.
        #expect(try await OwnerBrowser(port: server.port, address: "192.0.2.82").signIn("ana@example.org", fits + "anything").status == 401)
        #expect(
            try await OwnerBrowser(port: server.port, address: "192.0.2.81").signIn("ana@example.org", String(repeating: "é", count: 35))
                .status == 401)
    }

    /// Finding 8's other half: the simulated provider is for demos. A server that would take it
    /// beyond loopback refuses to start unless told so, and warns at every start.
    @Test func theSimulatedProviderBeyondLoopbackNeedsToBeAllowed() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("simulated-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let config = folder.appendingPathComponent("server.yaml")
        try Data("- clear: true\n".utf8).write(to: folder.appendingPathComponent("script.yaml"))
        try ServerProcess.write(folder, "tokens.yaml", "good-token: car-1\n", mode: 0o600)
        try Data(
            """
            server:
              host: 0.0.0.0
              port: 0
              tokensFile: \(folder.path)/tokens.yaml
            analyzer:
              kind: scripted
              scriptFile: \(folder.path)/script.yaml
            pairing:
              enabled: true
              signingKeyFile: \(folder.path)/signing.key
            payments:
              provider: simulated
            ledger: sqlite:\(folder.path)/usage.sqlite

            """.utf8
        ).write(to: config)
        let refused = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("guidance-server").path, ["--config", config.path])
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("payments.allowSimulated"), "\(refused.stderr)")
        let server = try await ServerProcess(
            server: ["host": "127.0.0.1"],
            extra: """
                pairing:
                  enabled: true
                  signingKeyFile: \(folder.path)/signing2.key
                payments:
                  provider: simulated
                  webhookSecretFile: \(folder.path)/webhook.secret
                """)
        #expect(server.process.stderr.contains("for demos only"), "no warning: \(server.process.stderr)")
    }
}
