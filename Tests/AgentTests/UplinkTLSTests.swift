@testable import Agent
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

/// TLS with a certificate authority made for the test: refused by the system trust store,
/// accepted with `uplink.caFile`.
@Suite(.serialized) struct UplinkTLSTests {
    func uplink(port: Int, credentials: TestCredentials, caFile: Bool) throws -> Uplink {
        var config = AgentConfig()
        // A name, not an address: TLS sends the host as SNI, which may not be an IP address.
        config.uplink.url = "wss://localhost:\(port)/v1/stream"
        config.uplink.tokenFile = credentials.token
        config.uplink.caFile = caFile ? credentials.ca : nil
        config.uplink.deviceId = "car-7"
        return try #require(try config.makeUplink(logger: Logger(label: "tls-test")))
    }

    @Test func aServerCertificateFromAnUnknownCAIsRefusedUnlessCaFileNamesIt() async throws {
        let credentials = try TestCredentials.make()
        defer { try? FileManager.default.removeItem(at: credentials.folder) }
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0, tls: (credentials.cert, credentials.key)),
            tokens: StaticDeviceTokens(["t0k3n": "car-7"]),
            analyzer: ScriptedAnalyzer(items: [.init(text: nil, lang: nil, clear: true, priority: nil)], order: .order),
            ledger: SQLiteLedger(path: ":memory:", logger: Logger(label: "tls-server")), logger: Logger(label: "tls-server"))
        let port = Mutex(0)
        let app = try ServerApplication(stream: server).build { bound in port.withLock { $0 = bound } }
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
