import Foundation
import Glibc
import TestSupport
import Testing

/// agent → Debian's nginx (TLS, `deploy/nginx/guidance-server.conf`) → guidance-server, with the
/// car moving between two paths 20 times: every old stream through nginx is closed, and neither
/// the server nor nginx keeps a session or a socket per handover.
@Suite(.serialized) struct NginxProxyTests {
    static let host = "guidance.test"
    static let proxyPort = 8443

    /// The shipped site file with only what a deployment changes: address, name, certificate, upstream port.
    static func site(serverPort: Int, credentials: TestCredentials, folder: URL) throws -> String {
        var text = try Nginx.shippedSite()
        let replacements = [
            "listen 443 ssl;": "listen \(TwoPaths.serverAddress):\(proxyPort) ssl;",
            "listen [::]:443 ssl;": "",
            "server_name guidance.example.com;": "server_name \(host);",
            "/etc/letsencrypt/live/guidance.example.com/fullchain.pem": credentials.cert,
            "/etc/letsencrypt/live/guidance.example.com/privkey.pem": credentials.key,
            "server 127.0.0.1:8080": "server 127.0.0.1:\(serverPort)",
            // One instance: its second line goes, as the deployment guide says.
            "    server 127.0.0.1:8081 max_fails=3 fail_timeout=10s;\n": "",
            "/var/log/nginx/guidance-server.access.log": folder.appendingPathComponent("access.log").path
        ]
        for (old, new) in replacements {
            #expect(text.contains(old), "the shipped config no longer has \(old)")
            text = text.replacingOccurrences(of: old, with: new)
        }
        return text
    }

    static func mainConfig(folder: URL) -> String {
        Nginx.mainConfig(folder: folder, http: "    include \(folder.path)/site.conf;")
    }

    /// Established TCP connections in `namespace` whose local (`sport`) or remote (`dport`) port is `port`.
    static func established(_ paths: TwoPaths, in namespace: String, _ filter: String) throws -> Int {
        let result = try Command.execute(
            paths.exec(in: namespace)[0], Array(paths.exec(in: namespace).dropFirst()) + ["ss", "-Htn", "state", "established", filter])
        return result.stdout.split(separator: "\n").count
    }

    @Test(.enabled(if: TwoPaths.available && Nginx.binary != nil, "needs root, network namespaces and nginx"))
    func twentyHandoversThroughNginxLeaveOneSessionAndOneStream() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let paths = try TwoPaths()
        defer { paths.remove() }
        try paths.nameInCar(Self.host, TwoPaths.serverAddress)
        let credentials = try TestCredentials.make(host: Self.host)
        defer { try? FileManager.default.removeItem(at: credentials.folder) }

        let (server, serverPort) = try await files.startServer(prefix: paths.exec(in: paths.server))
        defer { server.stop() }
        let proxyFolder = files.folder.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: proxyFolder, withIntermediateDirectories: true)
        try Self.site(serverPort: serverPort, credentials: credentials, folder: proxyFolder)
            .write(to: proxyFolder.appendingPathComponent("site.conf"), atomically: true, encoding: .utf8)
        try Self.mainConfig(folder: proxyFolder).write(
            to: proxyFolder.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
        let nginxArguments = Nginx.arguments(folder: proxyFolder)
        let inServer = paths.exec(in: paths.server)
        let check = try Command.execute(inServer[0], Array(inServer.dropFirst()) + [try #require(Nginx.binary), "-t"] + nginxArguments)
        try #require(check.status == 0, "nginx -t: \(check.stderr)")
        let proxy = try Spawned(
            try #require(Nginx.binary), nginxArguments, prefix: paths.exec(in: paths.server), folder: files.folder, absolute: true)
        defer { proxy.stop(SIGQUIT) }

        let agent = try Spawned(
            "dashcam-agent",
            [
                "record", "--config",
                try files.agentConfig(
                    url: "wss://\(Self.host):\(Self.proxyPort)/v1/stream", segmentSeconds: 1, caFile: credentials.ca,
                    uplink: UplinkContinuityTests.uplinkKeys)
            ], prefix: paths.exec(in: paths.car), folder: files.folder)
        defer { agent.stop() }
        try #require(
            await server.wait(for: .seconds(30)) { UplinkContinuityTests.received([$0]).count >= 1 },
            "nothing through nginx: \(agent.stderr.suffix(2000)) \((try? String(contentsOf: proxyFolder.appendingPathComponent("error.log"), encoding: .utf8)) ?? "")"
        )

        var baselineFds = 0
        for handover in 1...20 {
            try paths.switchToPath(handover % 2 == 1 ? 2 : 1)
            let reopened = await server.wait(for: .seconds(60)) { UplinkContinuityTests.sessions($0) == handover + 1 }
            try #require(reopened, "handover \(handover): no new session: \(agent.stderr.suffix(2000))")
            if handover == 2 { baselineFds = server.resources.fds }
            // Segments flow across the handovers (1 s each).
            try await Task.sleep(for: .milliseconds(400))
        }
        // The old streams are closed: the agent's 1001, or the server's 4000, or nginx's reap.
        // The server logs each session's end after its socket closes: waited for, not assumed.
        let settled = await server.wait(for: .seconds(60)) { server in
            ((try? Self.established(paths, in: paths.server, "( sport = :\(Self.proxyPort) )")) ?? 0) == 1
                && ((try? Self.established(paths, in: paths.server, "( dport = :\(serverPort) )")) ?? 0) == 1
                && server.count("ended", in: server.stderr) >= 20
        }
        let clientSide = try Self.established(paths, in: paths.server, "( sport = :\(Self.proxyPort) )")
        let upstream = try Self.established(paths, in: paths.server, "( dport = :\(serverPort) )")
        #expect(settled, "after 20 handovers: \(clientSide) agent stream(s) at nginx, \(upstream) to the server")
        #expect(server.count("ended", in: server.stderr) >= 20, "\(server.stderr.suffix(3000))")
        #expect(server.resources.fds <= baselineFds + 2, "server fds \(baselineFds) → \(server.resources.fds)")
        UplinkContinuityTests.expectNoGaps(agent, servers: [server])
    }
}
