public import Logging
public import ServiceLifecycle

extension ServerConfig {
    /// The server this configuration describes, with its tokens and analyzer loaded; `ledger`,
    /// `leases` and `services` come from ``openLedger(logger:)``. A problem with the tokens file,
    /// the script or the TLS files is a configuration error.
    public func makeServer(logger: Logger, ledger: any UsageLedger, leases: any SessionLeases, services: [any Service]) throws -> GuidanceServer {
        let analyzer: any SegmentAnalyzer = switch self.analyzer.kind {
        case .scripted:
            try ScriptedAnalyzer(file: self.analyzer.scriptFile ?? "", order: self.analyzer.order == .bySeq ? .seq : .order)
        }
        let tls = server.tlsCertFile.flatMap { cert in server.tlsKeyFile.map { (certificateFile: cert, keyFile: $0) } }
        return GuidanceServer(
            settings: .init(host: server.host, port: server.port, tls: tls, idleTimeoutSeconds: server.idleTimeoutSeconds,
                            keepDir: server.keepDir, usageSeconds: usage.remainingSeconds, maxSegmentBytes: server.maxSegmentBytes,
                            handshakeTimeoutMs: server.handshakeTimeoutMs, maxConnections: server.maxConnections),
            tokens: try DeviceTokens(file: server.tokensFile), analyzer: analyzer, ledger: ledger, leases: leases,
            services: services, logger: logger)
    }
}
