public import Logging

extension ServerConfig {
    /// The server this configuration describes, with its tokens and analyzer loaded.
    public func makeServer(logger: Logger) throws -> GuidanceServer {
        let analyzer: any SegmentAnalyzer = switch self.analyzer.kind {
        case .scripted:
            try ScriptedAnalyzer(file: self.analyzer.scriptFile ?? "", order: self.analyzer.order == .bySeq ? .seq : .order)
        }
        let tls = server.tlsCertFile.flatMap { cert in server.tlsKeyFile.map { (certificateFile: cert, keyFile: $0) } }
        return GuidanceServer(
            settings: .init(host: server.host, port: server.port, tls: tls, idleTimeoutSeconds: server.idleTimeoutSeconds,
                            keepDir: server.keepDir, usageSeconds: usage.remainingSeconds, maxSegmentBytes: server.maxSegmentBytes,
                            handshakeTimeoutMs: server.handshakeTimeoutMs, maxConnections: server.maxConnections),
            tokens: try DeviceTokens(file: server.tokensFile), analyzer: analyzer, logger: logger)
    }
}
