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
        let secure = try await AgentConfig.load(
            file: nil, environment: [:], overrides: ["uplink.url": "wss://guide.example:8443/v1/stream"])
        #expect(secure.uplink.url == "wss://guide.example:8443/v1/stream")
    }
}
