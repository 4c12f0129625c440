import ConfigSupport
import Foundation
public import Logging
public import ServiceLifecycle

extension ServerConfig {
    /// The server this configuration describes, with its analyzer loaded; `tokens` is
    /// `server.tokensFile` as read at start, and `ledger`, `leases` and `services` come from
    /// ``openLedger(logger:)``. A problem with the script or the TLS files is a configuration error.
    public func makeServer(
        tokens: StaticDeviceTokens, logger: Logger, ledger: any UsageLedger, leases: any SessionLeases, services: [any Service],
        pairing: Pairing? = nil
    ) throws -> StreamServer {
        let analyzer = try makeAnalyzer(ledger: ledger, logger: logger)
        let tls = server.tlsCertFile.flatMap { cert in server.tlsKeyFile.map { (certificateFile: cert, keyFile: $0) } }
        let clipStore = clips.dir.map { FileClipStore(root: $0, maxBytesPerDevice: clips.maxMegabytesPerCar << 20) }
        let trips: (any TripStore)? = pairing?.owners
        let retention =
            clipStore != nil || trips != nil
            ? ClipRetention(store: clipStore, trips: trips, days: clips.retentionDays, now: { Date() }, logger: logger) : nil
        let impactMail = try makeImpactMail(clips: clipStore, pairing: pairing, logger: logger)
        return StreamServer(
            settings: .init(
                host: server.host, port: server.port, tls: tls, idleTimeoutSeconds: server.idleTimeoutSeconds,
                keepDir: server.keepDir, usageSeconds: usage.remainingSeconds, maxSegmentBytes: server.maxSegmentBytes,
                handshakeTimeoutMs: server.handshakeTimeoutMs, maxConnections: server.maxConnections,
                maxConnectionsPerDevice: server.maxConnectionsPerDevice, closeTimeoutMs: server.closeTimeoutMs,
                clips: clipStore, maxClipFileBytes: clips.maxFileMegabytes << 20,
                maxClipBytesPerOwner: clips.maxMegabytesPerOwner << 20, impactMail: impactMail,
                maxInFlightBytes: server.maxInFlightMegabytes << 20, maxUpgradesInProgress: server.maxUpgradesInProgress,
                retryAfterSeconds: server.retryAfterSeconds),
            tokens: tokens, analyzer: analyzer, ledger: ledger, leases: leases,
            services: services + (retention.map { [$0] } ?? []) + (impactMail.map { [$0] } ?? []), pairing: pairing, logger: logger)
    }

    /// The analyzer `analyzer.kind` names. Its files (script, API key) are configuration: a
    /// problem with one is a ``ConfigError``.
    public func makeAnalyzer(ledger: any UsageLedger, logger: Logger) throws -> any SegmentAnalyzer {
        let settings = self.analyzer
        let timeout = Duration.milliseconds(settings.timeoutMs)
        switch settings.kind {
        case .scripted:
            return try ScriptedAnalyzer(file: settings.scriptFile ?? "", order: settings.order == .bySeq ? .seq : .order)
        case .gemini:
            let key = try apiKey(required: true) ?? ""
            let transcode: (@Sendable (Data) async throws -> Data)? =
                settings.transcodeToH264 ? { @Sendable data in try await SegmentVideo.h264(from: data) } : nil
            let endpoint = GeminiEndpoint(
                endpoint: settings.endpoint ?? ServerConfig.Kind.gemini.defaultEndpoint ?? "",
                model: settings.model ?? ServerConfig.Kind.gemini.defaultModel ?? "",
                apiKey: key, transcode: transcode)
            return HostedModelAnalyzer(endpoint: endpoint, timeout: timeout, ledger: ledger, logger: logger)
        case .openai:
            let count = settings.keyframes
            let endpoint = OpenAIChatEndpoint(
                endpoint: settings.endpoint ?? ServerConfig.Kind.openai.defaultEndpoint ?? "", model: settings.model ?? "",
                apiKey: try apiKey(required: false), keyframes: { try await SegmentVideo.keyframeJPEGs(from: $0, count: count) })
            return HostedModelAnalyzer(endpoint: endpoint, timeout: timeout, ledger: ledger, logger: logger)
        case .vision:
            do {
                return try VisionAnalyzer(framesPerSegment: settings.visionFrames)
            } catch {
                throw ConfigError.invalidOption("analyzer.kind", "vision", "an analyzer this machine can run (\(error))")
            }
        }
    }

    /// The key in `analyzer.apiKeyFile` (first line, trimmed), which must be private to its owner.
    func apiKey(required: Bool) throws(ConfigError) -> String? {
        guard let file = analyzer.apiKeyFile else {
            if required { throw .missingKey("analyzer.apiKeyFile", reason: "analyzer.kind '\(analyzer.kind.rawValue)' needs an API key") }
            return nil
        }
        let text = try PrivateFile.read(file, key: "analyzer.apiKeyFile", holding: "the model service's API key")
        let key = text.split(whereSeparator: \.isNewline).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard !key.isEmpty, key.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
            throw .invalidOption("analyzer.apiKeyFile", file, "a file whose first line is the API key (printable ASCII, no spaces)")
        }
        return key
    }
}
