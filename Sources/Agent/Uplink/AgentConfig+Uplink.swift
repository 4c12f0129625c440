import Foundation
import GuidanceProtocol
public import Logging
import NIOSSL

extension AgentConfig {
    /// The uplink `uplink.url` asks for, or `nil` to record only. Reads the token file.
    public func makeUplink(logger: Logger) throws -> Agent.Uplink? {
        guard let url = uplink.url else { return nil }
        let token = try TokenFile.read(uplink.tokenFile)
        var tls: TLSConfiguration?
        if url.hasPrefix("wss://") {
            var configuration = TLSConfiguration.makeClientConfiguration()
            if let caFile = uplink.caFile { configuration.trustRoots = .file(caFile) }
            tls = configuration
        }
        let hello = ClientMessage.Hello(
            device: uplink.deviceId, locale: uplink.locale ?? deviceLocale(), agent: AgentVersion.current,
            video: .init(width: camera.width, height: camera.height, fps: camera.fps, segmentMs: encoder.segmentSeconds * 1000),
            // One per run: with the device and seq it names a segment, so the server knows a re-send.
            stream: UUID().uuidString.lowercased())
        return Agent.Uplink(
            settings: .init(url: url, token: token, tls: tls, hello: hello, payload: uplink.payload,
                            ping: .seconds(uplink.pingSeconds),
                            backoff: Backoff(base: .milliseconds(uplink.reconnectBackoffMs.lowerBound),
                                             cap: .milliseconds(uplink.reconnectBackoffMs.upperBound)),
                            queueSegments: uplink.queueSegments,
                            queueMaxAgeMs: uplink.queueMaxAgeMs, guidanceMaxAgeMs: guidance.maxAgeMs,
                            liveness: uplink.livenessMs.map { .milliseconds($0) },
                            connectTimeout: .milliseconds(uplink.connectTimeoutMs), drain: .milliseconds(uplink.drainMs)),
            logger: logger)
    }
}

public enum AgentVersion {
    public static let current = "0.1.0"
}
