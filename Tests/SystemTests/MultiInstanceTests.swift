import Foundation
import Glibc
import GuidanceProtocol
import Testing
import TestSupport

/// Two `guidance-server` processes behind Debian's nginx (the shipped site's `/v1/stream`
/// location, round robin over both), sharing one real PostgreSQL database: a device's next session
/// lands on the other instance, which takes the lease; the first instance closes the old session
/// with 4000; a segment re-sent to the second is acknowledged without a second charge.
@Suite struct MultiInstanceTests {
    /// The shipped site's stream location, in a plain-HTTP server on `port` in front of `upstreams`,
    /// each with the shipped upstream's health-check parameters.
    static func nginxConfig(port: Int, upstreams: [Int], folder: URL) throws -> String {
        let site = try Nginx.shippedSite()
        guard let start = site.range(of: "map $http_upgrade"), let mapEnd = site.range(of: "}", range: start.upperBound..<site.endIndex),
            let location = site.range(of: "location = /v1/stream {"),
            let locationEnd = site.range(of: "\n    }", range: location.upperBound..<site.endIndex),
            let first = site.range(of: "server 127.0.0.1:8080 "),
            let firstEnd = site.range(of: ";", range: first.upperBound..<site.endIndex)
        else {
            throw PostgresServer.Failure(description: "the shipped site no longer has its map, upstream and /v1/stream location")
        }
        let health = site[first.upperBound..<firstEnd.lowerBound]
        return Nginx.mainConfig(
            folder: folder,
            http: """
                    access_log \(folder.path)/access.log;
                    \(site[start.lowerBound..<mapEnd.upperBound])
                    upstream guidance_server {
                \(upstreams.map { "        server 127.0.0.1:\($0) \(health);" }.joined(separator: "\n"))
                    }
                    server {
                        listen 127.0.0.1:\(port);
                        \(site[location.lowerBound..<locationEnd.upperBound])
                    }
                """)
    }

    /// nginx on a free port in front of `upstreams`, once its port answers.
    static func proxy(upstreams: [Int], folder: URL) async throws -> (Spawned, port: Int) {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let port = try PostgresServer.freePort()
        try Data(try nginxConfig(port: port, upstreams: upstreams, folder: folder).utf8).write(
            to: folder.appendingPathComponent("nginx.conf"))
        let proxy = try Spawned(try #require(Nginx.binary), Nginx.arguments(folder: folder), folder: folder, absolute: true)
        var listening = false
        for _ in 0..<200 where !listening {
            listening = (try? RawClient(port: port)) != nil
            if !listening { try await Task.sleep(for: .milliseconds(25)) }
        }
        if !listening { proxy.stop(SIGTERM) }
        try #require(listening, "nginx did not start: \(proxy.stderr)")
        return (proxy, port)
    }

    /// Two instances with 100 s of usage per car on a fresh PostgreSQL database, behind nginx.
    struct Fleet {
        let database: String
        /// The instances' config beside the `server:` section (usage, ledger).
        let extra: String
        let a: ServerProcess, b: ServerProcess
        let proxy: Spawned
        let proxyPort: Int

        static func start() async throws -> Fleet {
            let url = try await PostgresServer.shared().createDatabase()
            let extra = "usage:\n  remainingSeconds: 100\nledger: \(url)"
            let a = try await ServerProcess(extra: extra), b = try await ServerProcess(extra: extra)
            let (proxy, port) = try await MultiInstanceTests.proxy(
                upstreams: [a.port, b.port], folder: a.folder.appendingPathComponent("nginx"))
            return Fleet(database: String(url.split(separator: "/").last ?? ""), extra: extra, a: a, b: b, proxy: proxy, proxyPort: port)
        }

        /// TERM: the master stops its worker too (after -9 the worker would live on).
        func stop() { proxy.stop(SIGTERM) }
    }

    /// car-1's `hello`, with the stream id its segments are charged under.
    static let hello = ClientMessage.hello(
        .init(
            device: "car-1", locale: "en-US", agent: "test",
            video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000), stream: "run-1")
    ).encoded()

    @Test(.enabled(if: Nginx.binary != nil, "needs nginx"))
    func aNewSessionOnTheOtherInstanceClosesTheOldOneAndUsageCountsOnce() async throws {
        let fleet = try await Fleet.start()
        defer { fleet.stop() }
        let (database, a, b, proxyPort, hello) = (fleet.database, fleet.a, fleet.b, fleet.proxyPort, Self.hello)

        let data = await SampleSegment.clip(6)
        let header = ServerHardeningTests.header(
            seq: 1, durationMs: 5000, bytes: data.count, chunks: 1, sha: ServerHardeningTests.sha(data))
        let result = try await ServerHardeningTests.offPool {
            () -> (first: [String], close: Int?, second: [String], closeAfter: Duration) in
            // The first session: segment 1 acknowledged and charged; its ack is then "lost".
            let first = try RawClient(port: proxyPort, receiveTimeoutMs: 10_000)
            guard try first.upgrade(token: "good-token").status == 101 else {
                throw PostgresServer.Failure(description: "first upgrade refused")
            }
            try first.sendText(hello)
            var firstTexts = try first.readTexts(until: "welcome")
            try first.sendText(header)
            try first.sendFrame(.binary, data)
            firstTexts += try first.readTexts(until: #""usage""#)
            // The car's next session, through the same proxy: round robin sends it to the other instance.
            let second = try RawClient(port: proxyPort, receiveTimeoutMs: 10_000)
            guard try second.upgrade(token: "good-token").status == 101 else {
                throw PostgresServer.Failure(description: "second upgrade refused")
            }
            try second.sendText(hello)
            let opened = ContinuousClock.now
            var secondTexts = try second.readTexts(until: "welcome")
            var seen: [UInt8] = []
            let close = try first.readUntilClose(answerPings: true, within: .seconds(10), seen: &seen)
            let closeAfter = ContinuousClock.now - opened
            // The re-send of segment 1 on the new session.
            try second.sendText(header)
            try second.sendFrame(.binary, data)
            secondTexts += try second.readTexts(until: #""ack""#)
            return (firstTexts, close, secondTexts, closeAfter)
        }
        print("old session closed \(result.closeAfter) after the new one's hello, through nginx on the other instance")
        #expect(result.first.contains { $0.contains(#""remainingSeconds":95"#) }, "\(result.first)")
        #expect(result.close == Int(CloseCode.superseded.rawValue), "old session: \(result.close.map(String.init) ?? "not closed")")
        #expect(result.second.first?.contains(#""remainingSeconds":95"#) == true, "\(result.second)")
        #expect(result.second.contains { $0.contains(#""ack""#) && $0.contains(#""seq":1"#) }, "\(result.second)")
        // One session on each instance: the proxy really spread them, and the one that had the
        // first closed it.
        #expect(
            a.process.stderr.contains(" opened") && b.process.stderr.contains(" opened"),
            "not one session per instance: A \(a.process.stderr.suffix(1500)) B \(b.process.stderr.suffix(1500))")
        #expect(a.process.stderr.contains("superseded") != b.process.stderr.contains("superseded"))
        // Counted once, as psql sees it.
        let spent = try await PostgresServer.shared().psql(
            database: database, "SELECT spent || '|' || segments FROM balances WHERE device = 'car-1'")
        #expect(spent.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "5|1")
    }

    /// The fleet form losing an instance as it dies in the field: `kill -9`, with a segment sent
    /// and not yet acknowledged. The car's next connection through nginx is on the other instance
    /// at once (nginx passes it on when the dead one refuses), the segment re-sent there is
    /// acknowledged, and PostgreSQL counts each segment once. The killed instance, started again on
    /// its port, is back in rotation: new sessions land on it.
    @Test(.enabled(if: Nginx.binary != nil, "needs nginx"))
    func aCarWhoseInstanceIsKilledStreamsOnTheOtherAndEachSegmentIsChargedOnce() async throws {
        let fleet = try await Fleet.start()
        defer { fleet.stop() }
        let (database, extra, a, b, proxyPort, hello) = (fleet.database, fleet.extra, fleet.a, fleet.b, fleet.proxyPort, Self.hello)

        let data = await SampleSegment.clip(6)
        @Sendable func header(_ seq: Int) -> String {
            ServerHardeningTests.header(seq: seq, durationMs: 5000, bytes: data.count, chunks: 1, sha: ServerHardeningTests.sha(data))
        }
        @Sendable func session() throws -> RawClient {
            let client = try RawClient(port: proxyPort, receiveTimeoutMs: 10_000)
            let (status, head) = try client.upgrade(token: "good-token")
            guard status == 101 else { throw PostgresServer.Failure(description: "upgrade through nginx answered \(status): \(head)") }
            try client.sendText(hello)
            _ = try client.readTexts(until: "welcome")
            return client
        }
        // Segment 1 acknowledged; segment 2 sent whole, and its instance killed before any answer is read.
        let first = try await ServerHardeningTests.offPool { () -> RawClient in
            let client = try session()
            try client.sendText(header(1))
            try client.sendFrame(.binary, data)
            _ = try client.readTexts(until: #""ack""#)
            try client.sendText(header(2))
            try client.sendFrame(.binary, data)
            return client
        }
        let (victim, survivor) = a.process.stderr.contains(" opened") ? (a, b) : (b, a)
        victim.stop()
        // The car sees its connection end (nginx closes it when the instance's side dies).
        #expect(
            try await ServerHardeningTests.offPool { () -> Bool in
                var seen: [UInt8] = []
                _ = try? first.readUntilClose(answerPings: true, within: .seconds(30), seen: &seen)
                return first.isClosedByPeer()
            })
        // Its next connections are on the survivor at once (round robin would give one of two to
        // the dead instance: nginx passes it on), and segment 2 is acknowledged there.
        let second = try await ServerHardeningTests.offPool { () -> [String] in
            withExtendedLifetime(try session()) {}
            let client = try session()
            try client.sendText(header(2))
            try client.sendFrame(.binary, data)
            return try client.readTexts(until: #""ack""#)
        }
        #expect(second.last?.contains(#""seq":2"#) == true, "\(second)")
        #expect(survivor.process.stderr.contains(" opened"))
        let spent = try await PostgresServer.shared().psql(
            database: database, "SELECT spent || '|' || segments FROM balances WHERE device = 'car-1'")
        #expect(spent.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "10|2", "each segment charged once")

        // Started again on its port, the killed instance takes new sessions again.
        let back = try await ServerProcess(server: ["port": "\(victim.port)"], extra: extra, folder: victim.folder)
        var landed = false
        for _ in 0..<300 where !landed {
            let probe = try await ServerHardeningTests.offPool { () -> RawClient in try session() }
            landed = back.process.stderr.contains(" opened")
            withExtendedLifetime(probe) {}
            if !landed { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(landed, "no session reached the restarted instance: \(back.process.stderr.suffix(1500))")
        // Its log says what happened to the run before.
        #expect(
            await eventually(within: .seconds(60), every: .milliseconds(20)) { back.process.stderr.contains("ended without a shutdown") },
            "\(back.process.stderr.suffix(1500))")
        #expect(!survivor.process.stderr.contains("ended without a shutdown"))
    }
}
