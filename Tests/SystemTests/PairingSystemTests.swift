import Foundation
import GuidanceProtocol
import ServiceLifecycle
@testable import GuidanceServer
import Logging
import Testing
import TestSupport

/// Pairing against the real `guidance-server`: RFC 8628's endpoints over HTTP, the approval
/// written by the owner's side into the same ledger file, the access token at the stream's
/// upgrade, and refresh-token rotation with reuse revoking the pairing.
@Suite(.serialized) struct PairingSystemTests {
    struct Answer {
        let status: Int
        let json: [String: Any]
    }

    static func post(_ port: Int, _ path: String, _ form: [String: String]) async throws -> Answer {
        let body = form.sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }
            .joined(separator: "&")
        let result = try await Command.executeAsync(
            "/usr/bin/curl",
            [
                "-sS", "-w", "\n%{http_code}", "-H", "Content-Type: application/x-www-form-urlencoded",
                "--data-binary", body, "http://127.0.0.1:\(port)\(path)"
            ])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.last ?? "") ?? -1
        let json = (try? JSONSerialization.jsonObject(with: Data(lines.dropLast().joined(separator: "\n").utf8))) as? [String: Any] ?? [:]
        return Answer(status: status, json: json)
    }

    /// A server with pairing on, its signing key in its own folder.
    static func pairingServer() async throws -> (ServerProcess, key: String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pairing-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let key = folder.appendingPathComponent("signing.key").path
        return (try await ServerProcess(extra: "pairing:\n  enabled: true\n  signingKeyFile: \(key)\n", folder: folder), key)
    }

    @Test func aCarPairsByItsCodeConnectsWithItsAccessTokenAndLosesItsPairingOnReuse() async throws {
        let (server, key) = try await Self.pairingServer()
        defer { try? FileManager.default.removeItem(at: server.folder) }
        let ledgerPath = server.folder.appendingPathComponent("usage.sqlite").path
        // The signing key was made at start, private to the server's user.
        let mode = try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)

        let started = try await Self.post(
            server.port, "/oauth/device_authorization", ["client_id": "dashcam-agent", "device_name": "Ana's van"])
        #expect(started.status == 200)
        let deviceCode = try #require(started.json["device_code"] as? String)
        let userCode = try #require(started.json["user_code"] as? String)
        #expect(userCode.count == 9 && userCode.allSatisfy(\.isNumber))
        #expect(started.json["interval"] as? Int == 5)
        #expect(started.json["expires_in"] as? Int == 600)
        #expect((started.json["verification_uri"] as? String)?.hasSuffix("/pair") == true)

        let grant = ["client_id": "dashcam-agent", "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": deviceCode]
        let polled = ContinuousClock.now
        let first = try await Self.post(server.port, "/oauth/token", grant)
        #expect(first.status == 400 && first.json["error"] as? String == "authorization_pending")
        let tooSoon = try await Self.post(server.port, "/oauth/token", grant)
        // Within the 5-s interval the server must say slow down; a machine so busy that the two
        // polls were further apart may be told pending again.
        let allowed = ContinuousClock.now - polled < .seconds(5) ? ["slow_down"] : ["slow_down", "authorization_pending"]
        #expect(tooSoon.status == 400 && allowed.contains(tooSoon.json["error"] as? String ?? ""), "\(tooSoon.json)")

        // The owner's side: an account, the code typed, approved (the web page does this).
        let store = try await SQLitePairingStore.open(path: ledgerPath, logger: Logger(label: "owner-side"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: now)
        #expect(try await store.lookUp(userCode: userCode, owner: owner, address: "127.0.0.1", nowMs: now) != .wrong)
        #expect(
            try await store.decide(userCode: userCode, decision: .approve(owner: owner), owner: owner, address: "127.0.0.1", nowMs: now)
                == .decided)

        let paired = try await Self.post(server.port, "/oauth/token", grant)
        #expect(paired.status == 200)
        #expect(paired.json["token_type"] as? String == "Bearer")
        #expect(paired.json["owner_name"] as? String == "Ana")
        let access = try #require(paired.json["access_token"] as? String)
        let refresh = try #require(paired.json["refresh_token"] as? String)
        let device = try #require(paired.json["device_id"] as? String)
        #expect(try await store.pairedDevice(device)?.label == "Ana's van")
        // The device code is spent.
        #expect(try await Self.post(server.port, "/oauth/token", grant).json["error"] as? String == "invalid_grant")

        // The access token opens the stream; a forged one does not.
        #expect(try RawClient(port: server.port).upgrade(token: access).status == 101)
        #expect(try RawClient(port: server.port).upgrade(token: String(access.dropLast(2)) + "AA").status == 401)

        // Rotation: the refresh token gives new credentials once.
        let refreshGrant = ["client_id": "dashcam-agent", "grant_type": "refresh_token"]
        let rotated = try await Self.post(server.port, "/oauth/token", refreshGrant.merging(["refresh_token": refresh]) { $1 })
        #expect(rotated.status == 200)
        let next = try #require(rotated.json["refresh_token"] as? String)
        #expect(next != refresh)
        let second = try await Self.post(server.port, "/oauth/token", refreshGrant.merging(["refresh_token": next]) { $1 })
        #expect(second.status == 200)
        // The first token, long spent and its successor used: reuse. The pairing's tokens all go.
        let reused = try await Self.post(server.port, "/oauth/token", refreshGrant.merging(["refresh_token": refresh]) { $1 })
        #expect(reused.status == 400 && reused.json["error"] as? String == "invalid_grant")
        let latest = try #require(second.json["refresh_token"] as? String)
        #expect(
            try await Self.post(server.port, "/oauth/token", refreshGrant.merging(["refresh_token": latest]) { $1 }).json["error"]
                as? String == "invalid_grant")

        // Nothing secret in the server's log.
        try await store.shutdown()
        server.stop()
        for secret in [
            deviceCode, userCode, access, refresh, next, latest,
            try String(contentsOfFile: key, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        ] {
            #expect(!server.process.stderr.contains(secret), "the log shows a secret")
        }
    }

    @Test func badRequestsGetTheRFCsErrors() async throws {
        let (server, _) = try await Self.pairingServer()
        defer { try? FileManager.default.removeItem(at: server.folder) }
        #expect(try await Self.post(server.port, "/oauth/device_authorization", ["client_id": "someone-else"]).status == 401)
        let unsupported = try await Self.post(server.port, "/oauth/token", ["client_id": "dashcam-agent", "grant_type": "password"])
        #expect(unsupported.status == 400 && unsupported.json["error"] as? String == "unsupported_grant_type")
        let unknown = try await Self.post(
            server.port, "/oauth/token",
            [
                "client_id": "dashcam-agent", "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": "nope"
            ])
        #expect(unknown.status == 400 && unknown.json["error"] as? String == "invalid_grant")
        // A body over the limit is refused, and the server goes on.
        let huge = try await Self.post(
            server.port, "/oauth/token", ["client_id": "dashcam-agent", "x": String(repeating: "a", count: 10_000)])
        #expect(huge.status == 400 && huge.json["error"] as? String == "invalid_request")
        // A peer asking for code after code: ten requests from an address in 10 minutes (the
        // refused client above was the first), then 429 with slow_down.
        var statuses: [Int] = []
        for _ in 0..<10 {
            statuses.append(try await Self.post(server.port, "/oauth/device_authorization", ["client_id": "dashcam-agent"]).status)
        }
        #expect(statuses == Array(repeating: 200, count: 9) + [429], "\(statuses)")
        // Garbage where a form and a webhook belong: refused, and the server goes on.
        for (path, body) in [
            ("/oauth/token", "%zz=%%"), ("/oauth/token", "client_id=dashcam-agent&client_id=dashcam-agent"),
            ("/signin", String(repeating: "&", count: 5000))
        ] {
            let answer = try await Command.executeAsync(
                "/usr/bin/curl",
                [
                    "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: application/x-www-form-urlencoded",
                    "--data-binary", body, "http://127.0.0.1:\(server.port)\(path)"
                ])
            #expect(["400", "401", "403"].contains(answer.stdout), "\(path): \(answer.stdout)")
        }
        // Static tokens work as before beside pairing.
        #expect(try RawClient(port: server.port).upgrade(token: "good-token").status == 101)
        #expect(server.isRunning)
    }

    /// Two instances on one PostgreSQL ledger: the car paired through one streams to the other,
    /// and its owner unpairs it at the first. The second hears of it from the ledger and closes the
    /// stream with 4401; the access token is refused there from then on.
    @Test func aCarUnpairedAtOneInstanceIsClosedAtTheOther() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("pairing-key-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: key) }
        let extra = "pairing:\n  enabled: true\n  signingKeyFile: \(key)\nledger: \(url)"
        let a = try await ServerProcess(extra: extra)
        let b = try await ServerProcess(extra: extra)
        let started = try await Self.post(a.port, "/oauth/device_authorization", ["client_id": "dashcam-agent", "device_name": "van"])
        let deviceCode = try #require(started.json["device_code"] as? String)
        let userCode = try #require(started.json["user_code"] as? String)
        // The owner's side, on the same database.
        let ledger = try PostgresStore(url: url, logger: Logger(label: "owner-side"))
        try await withServices(ledger.ledgerServices) {
            let owners = PostgresPairingStore(ledger: ledger.ledger)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let owner = try await owners.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: now)
            _ = try await owners.lookUp(userCode: userCode, owner: owner, address: "127.0.0.1", nowMs: now)
            #expect(
                try await owners.decide(
                    userCode: userCode, decision: .approve(owner: owner), owner: owner, address: "127.0.0.1",
                    nowMs: now) == .decided)
            let paired = try await Self.post(
                a.port, "/oauth/token",
                [
                    "client_id": "dashcam-agent", "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": deviceCode
                ])
            let access = try #require(paired.json["access_token"] as? String)
            let device = try #require(paired.json["device_id"] as? String)
            let client = try RawClient(port: b.port, receiveTimeoutMs: 15_000)
            #expect(try client.upgrade(token: access).status == 101)
            try client.sendText(
                ClientMessage.hello(
                    .init(
                        device: "van", locale: "en-US", agent: "test",
                        video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000), stream: "s")
                ).encoded())
            _ = try client.readTexts(until: "welcome")
            #expect(try await owners.unpair(device: device, owner: owner, nowMs: Int64(Date().timeIntervalSince1970 * 1000)))
            let close = try await ServerHardeningTests.offPool { () -> Int? in
                var seen: [UInt8] = []
                return try client.readUntilClose(answerPings: true, within: .seconds(30), seen: &seen)
            }
            #expect(close == 4401)
            #expect(try RawClient(port: b.port).upgrade(token: access).status == 401)
        }
    }

    @Test func withoutPairingTheEndpointsAreNotThere() async throws {
        let server = try await ServerProcess()
        #expect(try await Self.post(server.port, "/oauth/device_authorization", ["client_id": "dashcam-agent"]).status == 404)
    }
}
