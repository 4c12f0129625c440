@testable import Agent
import ConfigSupport
import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Logging
import NIOSSL
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// Impact mails through a real SMTP server on loopback (Debian's aiosmtpd): STARTTLS with the
/// relay's certificate verified against `mail.caFile`, AUTH PLAIN over it, the message as the
/// relay took it; a relay without STARTTLS under `mail.starttls: required` gets nothing; and a
/// parked car's clip announced on two sessions to the server makes one mail to its owner.
@Suite(.serialized) struct MailRelayTests {
    static func client(port: Int, credentials: TestCredentials?, timeout: Duration = .seconds(120), logger: Logger = Logger(label: "smtp"))
        throws -> SMTPClient
    {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let credentials { tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(credentials.ca))] }
        return SMTPClient(relay: .init(host: "localhost", port: port), tls: tls, timeout: timeout, logger: logger)
    }

    static func message(subject: String, body: String) throws -> [UInt8] {
        try MailMessage(
            from: "dashcam@example.org", to: "ana@example.org", subject: subject, body: body, date: Date(), id: UUID().uuidString
        )
        .rendered()
    }

    @Test func aMailGoesOverSTARTTLSWithAuthAndArrivesAsWritten() async throws {
        let credentials = try TestCredentials.make(host: "localhost")
        defer { try? FileManager.default.removeItem(at: credentials.folder) }
        let relay = try await SMTPRelay(certificate: (credentials.cert, credentials.key), user: ("ana", "pässword"))
        defer { relay.stop() }
        let subject = "Impact on your parked car 아빠의 차"
        let body = "Your car recorded an impact.\n.a line that starts with a dot\n..and two\nhttps://cars.example.org/events/d1/c1"
        let outcome = try await Self.client(port: relay.port, credentials: credentials).send(
            try Self.message(subject: subject, body: body),
            settings: .init(
                ehloName: "server.example.org", startTLS: .required, credentials: ("ana", "pässword"),
                from: "dashcam@example.org", to: "ana@example.org"))
        #expect(outcome == .sent, "\(relay.process.stderr.suffix(2000))")
        #expect(await eventually { relay.received.count == 1 })
        let got = relay.received.first
        #expect(got?.from == "dashcam@example.org" && got?.to == ["ana@example.org"])
        #expect(got?.subject == subject)
        #expect(got?.auth == "ana", "AUTH PLAIN, after STARTTLS (the relay takes it only over TLS)")
        #expect(
            got?.body.replacingOccurrences(of: "\r\n", with: "\n") == body + "\n", "dot-stuffing undone by the relay: \(got?.body ?? "")")

        // A certificate the client does not trust (no mail.caFile): nothing is sent.
        let untrusted = try await Self.client(port: relay.port, credentials: nil).send(
            try Self.message(subject: "s", body: "b"),
            settings: .init(
                ehloName: "server.example.org", startTLS: .required, credentials: nil, from: "dashcam@example.org", to: "ana@example.org"))
        guard case .failed(let failure) = untrusted else { Issue.record("sent to a relay whose certificate is not trusted"); return }
        #expect(failure.description.contains("relay"), "\(failure)")
        #expect(relay.received.count == 1)
    }

    /// A man in the middle answers STARTTLS and sends replies in clear right behind its 220 (as
    /// in CVE-2021-38371): they would be taken for the encrypted session's. The client refuses
    /// before TLS, and no AUTH ever leaves it.
    @Test func repliesInClearBehindTheAnswerToSTARTTLSAreRefused() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mitm-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let script = folder.appendingPathComponent("mitm.py")
        try #"""
        import json, socket, sys
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        print(json.dumps({"port": server.getsockname()[1]}), flush=True)
        peer, _ = server.accept()
        peer.sendall(b"220 relay.example.org ESMTP\r\n")
        heard = b""
        while True:
            data = peer.recv(4096)
            if not data:
                break
            heard += data
            if heard.endswith(b"\r\n") and heard.split(b"\r\n")[-2].upper().startswith(b"EHLO") and b"STARTTLS" not in heard.upper():
                peer.sendall(b"250-relay.example.org\r\n250-STARTTLS\r\n250 AUTH PLAIN\r\n")
            elif heard.upper().endswith(b"STARTTLS\r\n"):
                peer.sendall(b"220 go ahead\r\n250-relay.example.org\r\n250 AUTH PLAIN\r\n")
        print(json.dumps({"heard": heard.decode("latin-1")}), flush=True)
        """#.write(to: script, atomically: true, encoding: .utf8)
        let mitm = try Spawned("/usr/bin/python3", [script.path], folder: folder, absolute: true)
        defer { mitm.stop(SIGKILL) }
        var port: Int?
        await mitm.wait(for: .seconds(60)) { spawned in
            port = spawned.wholeLines.first.flatMap { try? JSONDecoder().decode([String: Int].self, from: Data($0.utf8))["port"] }
            return port != nil || !spawned.process.isRunning
        }
        let outcome = try await Self.client(port: try #require(port), credentials: nil).send(
            try Self.message(subject: "s", body: "b"),
            settings: .init(
                ehloName: "server.example.org", startTLS: .whenOffered, credentials: ("ana", "pässword"),
                from: "dashcam@example.org", to: "ana@example.org"))
        guard case .failed(let failure) = outcome else { Issue.record("sent through a man in the middle: \(outcome)"); return }
        #expect(failure.description.contains("STARTTLS"), "\(failure)")
        // The client has closed: what the relay heard is complete, and holds no AUTH.
        #expect(await mitm.wait(for: .seconds(60)) { $0.wholeLines.count >= 2 })
        let heard =
            mitm.wholeLines.dropFirst().first.flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8))["heard"] }
            ?? ""
        #expect(heard.contains("STARTTLS") && !heard.uppercased().contains("AUTH"), "\(heard)")
    }

    @Test func aRelayWithoutSTARTTLSGetsNothingWhenItIsRequiredAndTheLogSaysSo() async throws {
        let relay = try await SMTPRelay(certificate: nil)
        defer { relay.stop() }
        let lines = LogLines()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        var config = ServerConfig()
        config.mail.relay = "localhost:\(relay.port)"
        config.mail.from = "dashcam@example.org"
        config.mail.starttls = .required
        let (store, ledger, pairing) = try await Self.ownerWithCar(in: folder, mail: true)
        defer {
            Task {
                try? await store.shutdown(); try? await ledger.shutdown()
            }
        }
        let mail = try #require(
            try config.makeImpactMail(clips: FileClipStore(root: folder.path + "/clips"), pairing: pairing, logger: lines.logger))
        let job = ImpactMail.Job(
            device: "d1", clip: Self.parked(id: "c1"),
            recipient: .init(owner: 1, address: "ana@example.org", carName: "Kona", clock: OwnerClock()))
        await mail.deliver(job)
        #expect(mail.sofar.failed == 1 && mail.sofar.sent == 0)
        #expect(
            lines.entries.contains {
                $0.level == .error && $0.message.contains("does not offer STARTTLS") && $0.message.contains("1 tries")
            },
            "\(lines.all)")
        // The relay took nothing: the client stopped before MAIL FROM, and a plain send goes through.
        let plain = try await Self.client(port: relay.port, credentials: nil).send(
            try Self.message(subject: "plain", body: "b"),
            settings: .init(ehloName: "s", startTLS: .whenOffered, credentials: nil, from: "dashcam@example.org", to: "ana@example.org"))
        #expect(plain == .sent)
        #expect(await eventually { relay.received.count == 1 })
        #expect(relay.received.map(\.subject) == ["plain"])
    }

    // MARK: - End to end

    static func parked(id: String, peakG: Double? = 3.2) -> ClientMessage.Clip {
        let data = [UInt8](repeating: 7, count: 100)
        return ClientMessage.Clip(
            id: id, kind: "parking", at: "2026-11-29T08:02:30.822Z", from: "2026-11-29T08:02:25.822Z", to: "2026-11-29T08:02:40.822Z",
            peakG: peakG, files: [.init(name: "a.mp4", bytes: data.count, sha256: sha256Hex(data))],
            gps: [.init(t: "2026-11-29T08:02:30Z", mode: 3, lat: 37.5665, lon: 126.978)])
    }

    /// A ledger and pairing store in `folder`, an owner (ana@example.org) with impact mails on or
    /// off, and her car `d1` ("Blue Kona") paired to her.
    static func ownerWithCar(in folder: URL, mail: Bool) async throws -> (SQLitePairingStore, SQLiteLedger, Pairing) {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let path = folder.appendingPathComponent("usage.sqlite").path
        let ledger = try await SQLiteLedger.open(path: path, logger: Logger(label: "ledger"))
        let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing"))
        let settings = DeviceAuthorization.Settings()
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: 1)
        _ = try await store.startAuthorization(
            deviceCodeHash: "dc1", deviceName: "Blue Kona", nowMs: 1, settings: settings, newUserCode: { "123456789" })
        _ = try await store.lookUp(userCode: "123456789", owner: owner, address: "192.0.2.1", nowMs: 2)
        _ = try await store.decide(userCode: "123456789", decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: 2)
        _ = try await store.poll(
            deviceCodeHash: "dc1", nowMs: 3, settings: settings, newDevice: "d1", refreshTokenHash: "r1",
            refreshExpiresAtMs: Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000)
        try await store.setPreferences(owner: owner, OwnerPreferences(timeZone: "Asia/Seoul", language: "en", impactMail: mail))
        var pairing = Pairing(
            store: store, tokens: AccessTokens(key: Array(repeating: 1, count: 32)), verificationURI: "https://cars.example.org/pair")
        pairing.owners = store
        return (store, ledger, pairing)
    }

    /// The server's own session code: a car (static token for `d1`) announces a parked clip with
    /// an impact on one session and again on the next (as it does until the clip is stored);
    /// the owner gets one mail, through STARTTLS, naming the car and linking the event. A clip
    /// without an impact, and a later impact, come after it on the second session: the mails
    /// come in the order of their clips, so when the later one's arrives, a second mail of the
    /// first would have come before it.
    @Test func aParkedCarsImpactAnnouncedOnTwoSessionsMakesOneMail() async throws {
        let credentials = try TestCredentials.make(host: "localhost")
        defer { try? FileManager.default.removeItem(at: credentials.folder) }
        let relay = try await SMTPRelay(certificate: (credentials.cert, credentials.key))
        defer { relay.stop() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let (store, ledger, pairing) = try await Self.ownerWithCar(in: folder, mail: true)
        defer {
            Task {
                try? await store.shutdown(); try? await ledger.shutdown()
            }
        }
        var config = ServerConfig()
        config.mail.relay = "localhost:\(relay.port)"
        config.mail.from = "dashcam@example.org"
        config.mail.caFile = credentials.ca
        config.mail.starttls = .required
        let lines = LogLines()
        let clips = FileClipStore(root: folder.appendingPathComponent("clips").path)
        let mail = try #require(try config.makeImpactMail(clips: clips, pairing: pairing, logger: lines.logger))
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0, clips: clips, impactMail: mail),
            tokens: StaticDeviceTokens(["good-token": "d1"]), analyzer: ScriptedAnalyzer(items: [], order: .seq), ledger: ledger,
            logger: lines.logger)
        let port = Mutex(0)
        let app = try ServerApplication(stream: server).build { bound in port.withLock { $0 = bound } }
        let running = Task { try await app.run() }
        let mailing = Task { try await mail.run() }
        defer {
            running.cancel()
            mailing.cancel()
        }
        #expect(await eventually { port.withLock { $0 } != 0 })

        /// One session: hello, then each clip announced, each answer awaited.
        func session(_ announced: [ClientMessage.Clip]) async throws {
            let connection = try await WebSocketConnection.connect(
                WebSocketConnectOptions(
                    url: "ws://127.0.0.1:\(port.withLock { $0 })/v1/stream", headers: [("Authorization", "Bearer good-token")]),
                logger: Logger(label: "car"))
            var inbound = connection.inbound.makeAsyncIterator()
            try await connection.send(
                text: ClientMessage.hello(
                    .init(
                        device: "d1", locale: "en-US", agent: "test",
                        video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000))
                ).encoded())
            var answers = 0
            for clip in announced { try await connection.send(text: ClientMessage.clip(clip).encoded()) }
            while answers < announced.count, let message = await inbound.next() {
                guard case .text(let text) = message, let decoded = try? ServerMessage.decode(text) else { continue }
                if case .clipHave = decoded { answers += 1 }
            }
            #expect(answers == announced.count)
            await connection.close(code: 1000, reason: "done", grace: .seconds(5))
        }

        try await session([Self.parked(id: "20261129T080230.822Z")])
        #expect(await eventually { relay.received.count == 1 }, "\(lines.all.suffix(20))")
        try await session([Self.parked(id: "20261129T080230.822Z"), Self.parked(id: "moved", peakG: nil), Self.parked(id: "later")])
        #expect(await eventually { relay.received.count >= 2 }, "\(lines.all.suffix(20))")
        let got = relay.received
        #expect(got.count == 2, "\(got)")
        #expect(got.map(\.to) == [["ana@example.org"], ["ana@example.org"]])
        #expect(got.first?.subject == "Impact on your parked car Blue Kona")
        #expect(got.first?.body.contains("https://cars.example.org/events/d1/20261129T080230.822Z") == true, "\(got.first?.body ?? "")")
        #expect(got.first?.body.contains("Peak: 3.2 g") == true)
        #expect(got.first?.body.contains("37.56650, 126.97800") == true)
        #expect(got.last?.body.contains("/events/d1/later") == true)
        // The relay prints a message before its answer: the client counts it once QUIT is answered.
        #expect(await eventually { mail.sofar.sent == 2 })
        #expect(mail.sofar == .init(queued: 2, sent: 2, failed: 0, dropped: 0, overLimit: 0))
    }

    /// The owner who did not turn it on gets nothing; the clip is marked all the same, so turning
    /// it on later does not bring a mail about an old impact.
    @Test func anOwnerWhoDidNotAskGetsNothing() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mail-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let (store, ledger, pairing) = try await Self.ownerWithCar(in: folder, mail: false)
        defer {
            Task {
                try? await store.shutdown(); try? await ledger.shutdown()
            }
        }
        var config = ServerConfig()
        config.mail.relay = "localhost:9"
        config.mail.from = "dashcam@example.org"
        let clips = FileClipStore(root: folder.appendingPathComponent("clips").path)
        let mail = try #require(try config.makeImpactMail(clips: clips, pairing: pairing, logger: Logger(label: "mail")))
        let clip = Self.parked(id: "c1")
        _ = try clips.announce(clip, device: "d1", now: Date())
        await mail.noticed(clip, device: "d1")
        #expect(mail.sofar == .init())
        #expect(try !clips.claimNotice(device: "d1", id: "c1"), "marked: its first announcement is past")
        // Static-token cars have no owner.
        _ = try clips.announce(clip, device: "car-9", now: Date())
        await mail.noticed(clip, device: "car-9")
        #expect(mail.sofar == .init())
    }
}
