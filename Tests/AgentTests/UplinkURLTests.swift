import Agent
import ConfigSupport
import Foundation
import TestSupport
import Testing

/// `uplink.url` is checked when the config loads: a URL the uplink could never connect to stops
/// the agent with exit 78 instead of being retried for ever.
@Suite struct UplinkURLTests {
    static let form = "a wss://HOST[:PORT]/PATH URL, e.g. wss://guidance.example.com/v1/stream (PORT 1-65535)"

    @Test(arguments: [
        ("wss://", "\(form); the host is missing"),
        ("wss:///v1/stream", "\(form); the host is missing"),
        ("wss://guide.example:99999/v1/stream", "\(form); 99999 is not a port"),
        ("wss://guide.example:0/v1/stream", "\(form); 0 is not a port"),
        ("wss://guide.example", "\(form); the path is missing"),
        ("wss://guide.example/v1/stream#x", "\(form) without a #fragment"),
        ("wss://car@guide.example/v1/stream", "\(form) without user@ or user:password@ (the token goes in uplink.tokenFile)"),
        ("wss://guide example/v1/stream", form),
        ("wss:guide.example/v1/stream", form),
        ("https://guide.example/v1/stream", form),
        ("WSS://guide.example/v1/stream", form),
        ("guide.example", form)
    ])
    func aURLTheUplinkCannotUseIsAConfigError(url: String, expected: String) async throws {
        let error = await #expect(throws: ConfigError.self) {
            try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": url])
        }
        #expect(error?.key == "uplink.url")
        #expect(error?.description == "uplink.url: '\(url)' is not allowed; expected \(expected)")
    }

    @Test func aPasswordInTheURLIsNotRepeated() async throws {
        let error = await #expect(throws: ConfigError.self) {
            try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": "wss://car:s3cret@guide.example/v1/stream"])
        }
        let message = try #require(error?.description)
        #expect(!message.contains("s3cret") && message.contains("wss://car:***@guide.example/v1/stream"), "\(message)")
    }

    @Test(arguments: [
        "wss://guide.example/v1/stream", "wss://guide.example:1/v1/stream", "wss://guide.example:65535/v1/stream",
        "wss://guide.example/", "wss://guide.example/v1/stream?fleet=7"
    ])
    func usableURLsLoad(url: String) async throws {
        let config = try await AgentConfig.load(file: nil, environment: [:], overrides: ["uplink.url": url])
        #expect(config.uplink.url == url)
    }
}
