import Agent
import ConfigSupport
import Foundation
import GuidanceProtocol
import GuidanceServer
import HAL
import Hummingbird
import Logging
import Synchronization
import TestSupport
import Testing

@Suite struct BackoffTests {
    @Test func delaysDoubleUpToTheCapWithFullJitter() {
        var backoff = Backoff()
        let ceilings = (0..<10).map { _ in backoff.next(sessionLived: nil, random: { $0 }) }
        #expect(ceilings.prefix(4) == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2)])
        #expect(ceilings.last == .seconds(30))
        var jittered = Backoff()
        #expect(jittered.next(sessionLived: nil, random: { $0 / 2 }) == .milliseconds(125))
    }

    @Test func aSessionThatLivedThirtySecondsResetsTheBackoff() {
        var backoff = Backoff()
        for _ in 0..<6 { _ = backoff.next(sessionLived: .seconds(3), random: { $0 }) }
        #expect(backoff.next(sessionLived: .seconds(31), random: { $0 }) == .milliseconds(250))
    }
}

@Suite struct TokenFileTests {
    @Test func aTokenFileOthersCanReadIsRefusedWithoutShowingTheToken() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("token-\(UUID().uuidString)").path
        try "s3cret-token\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        chmod(path, 0o644)
        #expect {
            _ = try TokenFile.read(path)
        } throws: { error in
            let text = "\(error)"
            return text.contains("readable by group or others (mode 644)") && text.contains(path) && !text.contains("s3cret")
        }
        chmod(path, 0o600)
        #expect(try TokenFile.read(path) == "s3cret-token")
    }
}

/// The agent's uplink against the reference server, both in this process, on loopback.
@Suite(.serialized) struct UplinkLoopbackTests {
    static let logger = Logger(label: "uplink-test")

    func makeServer(port: Int) -> StreamServer {
        StreamServer(
            settings: .init(host: "127.0.0.1", port: port, idleTimeoutSeconds: 30),
            tokens: DeviceTokens(["t0k3n": "car-7"]),
            analyzer: ScriptedAnalyzer(items: [.init(text: "slow down", lang: "en-US", clear: false, priority: .normal),
                                               .init(text: nil, lang: nil, clear: true, priority: nil)], order: .seq),
            ledger: SQLiteLedger(path: ":memory:", logger: Self.logger), logger: Self.logger)
    }

    func makeUplink(port: Int, token: String = "t0k3n") -> Uplink {
        Uplink(settings: .init(
            url: "ws://127.0.0.1:\(port)/v1/stream", token: .literal(token), tls: nil,
            hello: .init(device: "car-7", locale: "en-US", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000)),
            payload: .chunks, ping: .seconds(1), queueSegments: 3, queueMaxAgeMs: 60_000, guidanceMaxAgeMs: 60_000,
            // A loaded machine can leave a pong late by seconds: the session is not given up for
            // that here (a dropped session loses the guidance still owed on it).
            liveness: .seconds(30)),
            logger: Self.logger)
    }

    /// Starts the server; returns its task and the bound port.
    func start(_ server: StreamServer) async throws -> (Task<Void, any Error>, Int) {
        let port = Mutex(0)
        let app = try server.application { bound in port.withLock { $0 = bound } }
        let task = Task { try await app.run() }
        while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        return (task, port.withLock { $0 })
    }

    @Test func segmentsAreAckedInOrderAndGuidanceComesBack() async throws {
        let (server, port) = try await start(makeServer(port: 0))
        defer { server.cancel() }
        let uplink = makeUplink(port: port)
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }
        // A server that never answers would leave the loop below waiting: shutting the uplink
        // down ends its messages, and the expectations then fail.
        let deadline = Task {
            try await Task.sleep(for: .seconds(60))
            await uplink.shutdown()
        }
        defer { deadline.cancel() }
        let now = MonotonicClock.now()
        var acks: [Int] = [], guidance: [ServerMessage.Guidance] = []
        var messages = uplink.messages.makeAsyncIterator()
        // One segment after the other's guidance: the server analyses the newest segment of a
        // session and skips one still waiting behind another (only the latest view of the road
        // matters), which a busy machine would do to segments sent together.
        for seq in 0..<3 {
            // The last as a file played fast makes it: captured "later" than now.
            await uplink.enqueue(testSegment(seq: seq, capturedAt: seq == 2 ? now + 60_000_000_000 : now, bytes: 150_000))
            while let message = await messages.next() {
                if case .ack(let seq) = message { acks.append(seq) }
                if case .guidance(let g) = message {
                    guidance.append(g)
                    if g.seq == seq { break }
                }
            }
        }
        #expect(acks == [0, 1, 2])
        #expect(guidance.map(\.seq) == [0, 1, 2])
        #expect(guidance.map(\.clear) == [false, true, false])
        let stats = await uplink.stats
        #expect(stats.sent == 3 && stats.acked == 3 && stats.dropped == 0)
        #expect(stats.sessions == 1)
        await uplink.shutdown()
        running.cancel()
    }

    @Test func theUplinkComesBackByItselfAfterTheServerRestarts() async throws {
        let (first, port) = try await start(makeServer(port: 0))
        let uplink = makeUplink(port: port)
        let running = Task { await uplink.run(networkChanges: AsyncStream { _ in }) }
        let now = MonotonicClock.now()
        await uplink.enqueue(testSegment(seq: 0, capturedAt: now))
        var iterator = uplink.messages.makeAsyncIterator()
        while let message = await iterator.next() { if case .ack(0) = message { break } }
        first.cancel()
        _ = try? await first.value
        let (second, _) = try await start(makeServer(port: port))
        defer { second.cancel() }
        await uplink.enqueue(testSegment(seq: 1, capturedAt: MonotonicClock.now()))
        while let message = await iterator.next() { if case .ack(1) = message { break } }
        let stats = await uplink.stats
        #expect(stats.sessions == 2)
        #expect(stats.acked == 2)
        await uplink.shutdown()
        running.cancel()
    }

    @Test func aNetworkChangeOpensANewSessionAtOnce() async throws {
        let (server, port) = try await start(makeServer(port: 0))
        defer { server.cancel() }
        let uplink = makeUplink(port: port)
        let (changes, change) = AsyncStream<NetworkChange>.makeStream()
        let running = Task { await uplink.run(networkChanges: changes) }
        var iterator = uplink.messages.makeAsyncIterator()
        while let message = await iterator.next() { if case .welcome = message { break } }
        let changed = ContinuousClock.now
        let route = { (name: String) in
            NetworkPath.Route(interfaceName: name, interfaceIndex: 2, gateway: IPAddress("10.0.0.1"), addresses: [], isUp: true)
        }
        change.yield(NetworkChange(old: NetworkPath(ipv4: route("wlan0")), new: NetworkPath(ipv4: route("usb0"))))
        while let message = await iterator.next() { if case .welcome = message { break } }
        let took = ContinuousClock.now - changed
        #expect(took < .seconds(1), "new session after \(took)")
        #expect(await uplink.stats.sessions == 2)
        await uplink.shutdown()
        running.cancel()
    }
}

enum SHA256Hex {
    static func of(_ data: [UInt8]) -> String {
        // The server checks this digest; sha256sum computes it independently of our code.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("digest-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: file.path, contents: Data(data))
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        process.arguments = [file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try? process.run()
        let output = (try? pipe.fileHandleForReading.readToEnd()) ?? Data()
        process.waitUntilExit()
        return String(String(decoding: output, as: UTF8.self).prefix(64))
    }
}

/// TLS with a certificate authority made for the test: refused by the system trust store,
/// accepted with `uplink.caFile`.
@Suite(.serialized) struct UplinkTLSTests {
    struct Credentials {
        let folder: URL
        var ca: String { folder.appendingPathComponent("ca.pem").path }
        var cert: String { folder.appendingPathComponent("server.pem").path }
        var key: String { folder.appendingPathComponent("server.key").path }
        var token: String { folder.appendingPathComponent("token").path }
    }

    /// A CA and a server certificate for `host`, and a private token file.
    func makeCredentials(host: String = "localhost") throws -> Credentials {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let c = Credentials(folder: folder)
        let san = folder.appendingPathComponent("san.cnf").path
        try "subjectAltName=DNS:\(host),IP:127.0.0.1\n".write(toFile: san, atomically: true, encoding: .utf8)
        let csr = folder.appendingPathComponent("server.csr").path
        let caKey = folder.appendingPathComponent("ca.key").path
        for arguments in [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", c.ca, "-days", "1", "-subj", "/CN=dashcam test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", c.key, "-out", csr, "-subj", "/CN=\(host)"],
            ["x509", "-req", "-in", csr, "-CA", c.ca, "-CAkey", caKey, "-CAcreateserial", "-out", c.cert, "-days", "1", "-extfile", san],
        ] {
            let result = try TestSupport.Command.execute("openssl", arguments)
            #expect(result.status == 0, "openssl \(arguments[0]): \(result.stderr)")
        }
        try "t0k3n\n".write(toFile: c.token, atomically: true, encoding: .utf8)
        chmod(c.token, 0o600)
        return c
    }

    func uplink(port: Int, credentials: Credentials, caFile: Bool) throws -> Uplink {
        var config = AgentConfig()
        // A name, not an address: TLS sends the host as SNI, which may not be an IP address.
        config.uplink.url = "wss://localhost:\(port)/v1/stream"
        config.uplink.tokenFile = credentials.token
        config.uplink.caFile = caFile ? credentials.ca : nil
        config.uplink.deviceId = "car-7"
        return try #require(try config.makeUplink(logger: Logger(label: "tls-test")))
    }

    @Test func aServerCertificateFromAnUnknownCAIsRefusedUnlessCaFileNamesIt() async throws {
        let credentials = try makeCredentials()
        defer { try? FileManager.default.removeItem(at: credentials.folder) }
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0, tls: (credentials.cert, credentials.key)),
            tokens: DeviceTokens(["t0k3n": "car-7"]),
            analyzer: ScriptedAnalyzer(items: [.init(text: nil, lang: nil, clear: true, priority: nil)], order: .order),
            ledger: SQLiteLedger(path: ":memory:", logger: Logger(label: "tls-server")), logger: Logger(label: "tls-server"))
        let port = Mutex(0)
        let app = try server.application { bound in port.withLock { $0 = bound } }
        let serverTask = Task { try await app.run() }
        defer { serverTask.cancel() }
        while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }

        let untrusting = try uplink(port: port.withLock { $0 }, credentials: credentials, caFile: false)
        let refused = Task { await untrusting.run(networkChanges: AsyncStream { $0.finish() }) }
        // Returns at the second failed handshake; a busy machine takes longer than an idle one.
        let refusedBy = ContinuousClock.now + .seconds(60)
        while await untrusting.stats.reconnects < 2, ContinuousClock.now < refusedBy {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(await untrusting.stats.reconnects >= 2, "handshakes were tried and failed")
        #expect(await untrusting.stats.sessions == 0, "the system trust store must not accept the test CA")
        await untrusting.shutdown()
        refused.cancel()

        let trusting = try uplink(port: port.withLock { $0 }, credentials: credentials, caFile: true)
        let accepted = Task { await trusting.run(networkChanges: AsyncStream { $0.finish() }) }
        // Bounded wait: a refused handshake would otherwise leave the stream silent forever.
        let welcomed = Mutex(false)
        let listener = Task {
            for await message in trusting.messages {
                if case .welcome = message { welcomed.withLock { $0 = true } }
            }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while !welcomed.withLock({ $0 }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(welcomed.withLock { $0 }, "a session over TLS once caFile names the CA")
        #expect(await trusting.stats.sessions == 1)
        await trusting.shutdown()
        accepted.cancel()
        listener.cancel()
    }
}

@Suite struct UplinkConfigTests {
    @Test func plainWebSocketNeedsAllowInsecureAndTLSNeedsAHostName() async throws {
        await #expect {
            _ = try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": "ws://server.example/v1/stream"])
        } throws: { "\($0)".contains("ws:// needs uplink.allowInsecure: true") }
        await #expect {
            _ = try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": "wss://192.0.2.10/v1/stream"])
        } throws: { "\($0)".contains("host name") }
        let insecure = try await AgentConfig.load(
            file: nil, environment: [:], overrides: ["uplink.url": "ws://127.0.0.1:8080/v1/stream", "uplink.allowInsecure": "true"])
        #expect(insecure.uplink.allowInsecure)
        let secure = try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": "wss://guide.example:8443/v1/stream"])
        #expect(secure.uplink.url == "wss://guide.example:8443/v1/stream")
    }
}
