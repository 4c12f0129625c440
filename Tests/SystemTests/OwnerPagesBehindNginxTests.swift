import Foundation
import Glibc
import Testing
import TestSupport

/// The owners' pages in the guide's deployment: Debian's nginx with the shipped site (TLS ends
/// there) in front of `guidance-server` speaking HTTP on loopback. A browser must get cookies
/// marked Secure and one `Strict-Transport-Security` header on every page, though the server
/// itself never sees TLS; and a peer that is not the local proxy cannot claim HTTPS.
@Suite(.serialized) struct OwnerPagesBehindNginxTests {
    static let host = "guidance.test"

    /// The shipped site with only what a deployment changes, listening on loopback at `port`.
    static func site(port: Int, serverPort: Int, credentials: TestCredentials, folder: URL) throws -> String {
        var text = try Nginx.shippedSite()
        for (old, new) in [
            "listen 443 ssl;": "listen 127.0.0.1:\(port) ssl;", "listen [::]:443 ssl;": "",
            "server_name guidance.example.com;": "server_name \(host);",
            "/etc/letsencrypt/live/guidance.example.com/fullchain.pem": credentials.cert,
            "/etc/letsencrypt/live/guidance.example.com/privkey.pem": credentials.key,
            "server 127.0.0.1:8080": "server 127.0.0.1:\(serverPort)",
            // One instance: its second line goes, as the deployment guide says.
            "    server 127.0.0.1:8081 max_fails=3 fail_timeout=10s;\n": "",
            "/var/log/nginx/guidance-server.access.log": folder.appendingPathComponent("access.log").path
        ] {
            #expect(text.contains(old), "the shipped config no longer has \(old)")
            text = text.replacingOccurrences(of: old, with: new)
        }
        return text
    }

    @Test(.enabled(if: Nginx.binary != nil, "needs nginx"))
    func cookiesAreSecureAndEveryPageSendsHSTSBehindTheShippedProxy() async throws {
        let server = try await OwnerSiteAttackTests.server()
        let credentials = try TestCredentials.make(host: Self.host)
        defer { try? FileManager.default.removeItem(at: credentials.folder) }
        let folder = server.folder.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // A free port can be taken by a test running beside this one before nginx binds it: then
        // nginx exits ("Address already in use") and another port is tried.
        var started: (proxy: Spawned, browser: OwnerBrowser, page: OwnerBrowser.Page)?
        var failures: [String] = []
        for _ in 0..<5 where started == nil {
            let port = try PostgresServer.freePort()
            try Data(try Self.site(port: port, serverPort: server.port, credentials: credentials, folder: folder).utf8)
                .write(to: folder.appendingPathComponent("site.conf"))
            try Data(Nginx.mainConfig(folder: folder, http: "    include \(folder.path)/site.conf;").utf8)
                .write(to: folder.appendingPathComponent("nginx.conf"))
            let proxy = try Spawned(try #require(Nginx.binary), Nginx.arguments(folder: folder), folder: folder, absolute: true)
            var browser = OwnerBrowser(port: port, scheme: "https", host: Self.host)
            browser.curlOptions = ["--cacert", credentials.ca, "--resolve", "\(Self.host):\(port):127.0.0.1"]
            // Up once its port answers; waited for as long as a busy machine takes, unless nginx exits.
            let deadline = ContinuousClock.now + .seconds(120)
            while started == nil, proxy.process.isRunning, ContinuousClock.now < deadline {
                if let page = try? await browser.get("/signin") {
                    started = (proxy, browser, page)
                } else {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            if started == nil {
                failures.append(proxy.stderr)
                proxy.stop(SIGTERM)
            }
        }
        let (proxy, browser, first) = try #require(started, "nginx did not answer: \(failures.joined(separator: "\n"))")
        defer { proxy.stop(SIGTERM) }
        let signinPage = first
        #expect(signinPage.status == 200)
        #expect(signinPage.header("Strict-Transport-Security") == ["max-age=31536000"], "\(signinPage.headers)")
        let preCookie = try #require(signinPage.header("Set-Cookie").first { $0.hasPrefix("csrf_pre=") })
        #expect(OwnerSiteAttackTests.cookieIsSecure(preCookie), "\(preCookie)")

        // Signed in through the proxy: the session cookie is Secure too, and so is every page after.
        let set = try await browser.setPassword(
            link: try await OwnerSiteAttackTests.ownerLink(server, "ana@example.org"),
            OwnerSiteAttackTests.password)
        #expect(set.status == 200)
        let signedIn = try await browser.signIn("ana@example.org", OwnerSiteAttackTests.password)
        #expect(signedIn.status == 303)
        let session = try #require(signedIn.header("Set-Cookie").first { $0.hasPrefix("session=") }, "\(signedIn.headers)")
        #expect(OwnerSiteAttackTests.cookieIsSecure(session), "\(session)")
        #expect(signedIn.header("Strict-Transport-Security").count == 1)
        let cars = try await browser.get("/")
        #expect(cars.status == 200 && cars.header("Strict-Transport-Security") == ["max-age=31536000"])

        // A shared event's link (its token is in the path), answered or not.
        let sharedToken = "eyJzZWNyZXQiOiJzaGFyZWQgbGluayJ9.c2lnbmF0dXJl"
        _ = try await browser.get("/shared/\(sharedToken)")
        _ = try await browser.get("/shared/\(sharedToken)/files/000001-20261129T080220.822Z.mp4")

        // The proxy's access log keeps paths, never a link's token; /metrics is not public in any spelling.
        let accessLog = try String(contentsOf: folder.appendingPathComponent("access.log"), encoding: .utf8)
        #expect(accessLog.contains("/set-password") && !accessLog.contains("token="), "\(accessLog)")
        #expect(
            accessLog.contains("GET /shared/- ") && accessLog.contains("GET /shared/-/files/000001-20261129T080220.822Z.mp4 ")
                && !accessLog.contains(sharedToken), "\(accessLog)")
        for path in ["/metrics", "/metrics/", "/metrics//"] { #expect(try await browser.get(path).status == 404, "\(path)") }

        // Straight to the server from this machine, without the proxy's header: plain HTTP, no
        // Secure (a browser would otherwise drop the cookie), no HSTS.
        let direct = try await OwnerBrowser(port: server.port).get("/signin")
        #expect(direct.header("Strict-Transport-Security").isEmpty)
        #expect(!OwnerSiteAttackTests.cookieIsSecure(try #require(direct.header("Set-Cookie").first)))
    }
}

extension OwnerSiteAttackTests {
    static func cookieIsSecure(_ header: String) -> Bool {
        header.split(separator: ";").contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "secure" }
    }
}
