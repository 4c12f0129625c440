import ConfigSupport
import Foundation
import GuidanceProtocol
import HAL
public import Logging
import NIOSSL

extension AgentConfig {
    /// The uplink `uplink.url` asks for, or `nil` to record only. The token file is read at each
    /// connection attempt: a missing or unusable one pauses the uplink, never the recording.
    public func makeUplink(logger: Logger, credentials: DeviceCredentials? = nil) throws -> Agent.Uplink? {
        guard let url = uplink.url else { return nil }
        let token = credentials.map { TokenSource.fileOrPaired(uplink.tokenFile, $0) } ?? .file(uplink.tokenFile)
        let tls = uplinkTLS(url: url)
        let hello = uplinkHello()
        return Agent.Uplink(
            settings: .init(
                url: url, token: token, tls: tls, hello: hello, connectTimeout: .milliseconds(uplink.connectTimeoutMs),
                clipCustody: ClipCustody(root: URL(fileURLWithPath: recording.dir)),
                rules: .init(
                    backoff: Backoff(
                        base: .milliseconds(uplink.reconnectBackoffMs.lowerBound),
                        cap: .milliseconds(uplink.reconnectBackoffMs.upperBound)),
                    liveness: uplink.livenessMs.map { .milliseconds($0) }, ping: .seconds(uplink.pingSeconds),
                    drain: .milliseconds(uplink.drainMs), guidanceMaxAge: .milliseconds(guidance.maxAgeMs),
                    queueSegments: uplink.queueSegments, queueMaxAgeMs: uplink.queueMaxAgeMs,
                    restartSpread: .milliseconds(uplink.restartSpreadMs),
                    clips: .init(dailyBytes: upload.dailyMegabytes.map { $0 << 20 }, wifiOnly: upload.when == .wifi))),
            logger: logger)
    }
}

extension AgentConfig {
    /// TLS for a `wss://` URL: the system's roots, or `uplink.caFile`'s.
    func uplinkTLS(url: String) -> TLSConfiguration? {
        guard url.hasPrefix("wss://") else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let caFile = uplink.caFile { configuration.trustRoots = .file(caFile) }
        return configuration
    }

    /// The `hello` of a run: a new stream id each time (with the device and seq it names a
    /// segment, so the server knows a re-send).
    func uplinkHello() -> ClientMessage.Hello {
        ClientMessage.Hello(
            device: uplink.deviceId, locale: deviceLocale(), agent: AgentVersion.current,
            video: .init(width: camera.width, height: camera.height, fps: camera.fps, segmentMs: encoder.segmentSeconds * 1000),
            stream: UUID().uuidString.lowercased())
    }

    /// The forms `uplink.url` may take, for messages.
    static let uplinkURLForm = "a wss://HOST[:PORT]/PATH URL, e.g. wss://guidance.example.com/v1/stream (PORT 1-65535)"

    /// Checks `uplink.url` as the uplink will read it, so that a URL it could never connect to
    /// stops the agent at start (exit 78) instead of being retried for ever.
    func validateUplinkURL() throws(ConfigError) {
        guard let url = uplink.url else { return }
        // A password in the URL must not reach the log.
        let shown =
            URLComponents(string: url).flatMap { parts -> String? in
                guard parts.password != nil else { return nil }
                var masked = parts
                masked.password = "***"
                return masked.string
            } ?? url
        func refuse(_ expected: String) -> ConfigError { .invalidOption("uplink.url", shown, expected) }
        let insecure = url.hasPrefix("ws://")
        guard url.hasPrefix("wss://") || (insecure && uplink.allowInsecure) else {
            throw refuse(insecure ? "a wss:// URL; ws:// needs uplink.allowInsecure: true" : Self.uplinkURLForm)
        }
        guard let parts = URLComponents(string: url), parts.scheme == (insecure ? "ws" : "wss") else {
            throw refuse(Self.uplinkURLForm)
        }
        guard let host = parts.host, !host.isEmpty else { throw refuse("\(Self.uplinkURLForm); the host is missing") }
        if let port = parts.port, !(1...65535).contains(port) {
            throw refuse("\(Self.uplinkURLForm); \(port) is not a port")
        }
        if parts.user != nil || parts.password != nil {
            throw refuse("\(Self.uplinkURLForm) without user@ or user:password@ (the token goes in uplink.tokenFile)")
        }
        if parts.fragment != nil { throw refuse("\(Self.uplinkURLForm) without a #fragment") }
        if parts.percentEncodedPath.isEmpty { throw refuse("\(Self.uplinkURLForm); the path is missing") }
        // TLS names the server in SNI, which cannot carry an IP address.
        if !insecure, IPAddress(host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))) != nil {
            throw refuse("a wss:// URL with the server's host name (TLS cannot verify a bare IP address)")
        }
    }
}

public enum AgentVersion {
    /// Sent in `hello` as the agent's name and version.
    public static let current = ReleaseVersion.current
}

extension AgentConfig {
    /// The client of the server's pairing endpoints, when the car may pair (`uplink.url` set,
    /// `uplink.pairing` on); `nil` otherwise.
    public func makePairingClient() -> PairingClient? {
        guard uplink.pairing, let url = uplink.url else { return nil }
        return PairingClient(uplinkURL: url, tls: uplinkTLS(url: url))
    }
}
