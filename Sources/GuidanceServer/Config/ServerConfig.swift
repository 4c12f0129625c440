public import ConfigSupport
import Foundation
public import Logging

/// Everything the guidance server reads from configuration.
///
/// `ServerConfig()` is the built-in defaults, written only here; build a real one with
/// `ServerConfig.load(file:environment:overrides:)` (from `LoadableConfig`): command line >
/// environment (`GUIDANCE_SERVER_PORT`, …) > YAML file > defaults. Relative paths are taken from
/// the working directory.
public struct ServerConfig: LoadableConfig {
    public var server = Server()
    public var analyzer = Analyzer()
    public var usage = Usage()
    public var pairing = PairingSection()
    public var payments = Payments()
    public var clips = Clips()
    public var mail = Mail()
    public var log = Log()
    /// Where usage is kept: `sqlite:PATH` (one server) or `postgres://…` (a fleet of instances).
    public var ledger = "sqlite:usage.sqlite"

    public init() {}

    public struct Server: Sendable, Equatable {
        public var host = StreamServer.Settings.standard.host
        /// 0 lets the system pick a free port.
        public var port = StreamServer.Settings.standard.port
        /// TLS certificate chain (PEM); set together with `tlsKeyFile`, or neither for plain HTTP/WS.
        public var tlsCertFile: String?
        /// The private key of `tlsCertFile` (PEM).
        public var tlsKeyFile: String?
        /// YAML mapping of bearer token → device id.
        public var tokensFile = "tokens.yaml"
        /// Seconds a session may be silent (no message, no pong) before it is closed with 4001; the server pings once half way.
        public var idleTimeoutSeconds = StreamServer.Settings.standard.idleTimeoutSeconds
        /// Folder received segments are kept in; nil keeps none.
        public var keepDir: String?
        /// Largest segment accepted (its header's `bytes`).
        public var maxSegmentBytes = StreamServer.Settings.standard.maxSegmentBytes
        /// Time a new connection has to complete its upgrade request, TLS handshake included.
        public var handshakeTimeoutMs = StreamServer.Settings.standard.handshakeTimeoutMs
        /// Connections open at once; more are answered 503 with `Retry-After`.
        public var maxConnections = StreamServer.Settings.standard.maxConnections
        /// Stream connections one device may hold at once; more are answered 429 with `Retry-After`.
        public var maxConnectionsPerDevice = StreamServer.Settings.standard.maxConnectionsPerDevice
        /// Time a peer has to answer the server's close; then the socket is closed.
        public var closeTimeoutMs = StreamServer.Settings.standard.closeTimeoutMs
        /// Bytes of segments being received at once, server-wide, in MiB; past it, sessions wait
        /// and their sockets are not read. Well inside the unit's `MemoryMax` (2 GiB).
        public var maxInFlightMegabytes = StreamServer.Settings.standard.maxInFlightBytes >> 20
        /// Stream sessions starting at once (upgrade to `welcome`); more are answered 503.
        public var maxUpgradesInProgress = StreamServer.Settings.standard.maxUpgradesInProgress
        /// Seconds a refusal for capacity (503, 429) asks to wait: a random number from this to twice this.
        /// Short: the cars of a dead instance must be streaming on another within seconds.
        public var retryAfterSeconds = StreamServer.Settings.standard.retryAfterSeconds

        public init() {}

        /// Whether the server listens with TLS (`validate()` ensures both files or neither).
        public var usesTLS: Bool { tlsCertFile != nil && tlsKeyFile != nil }
    }

    public struct Analyzer: Sendable, Equatable {
        public var kind: Kind = .scripted
        /// The script the `scripted` analyzer plays; required for that kind.
        public var scriptFile: String?
        public var order: Order = .inOrder
        /// Base URL of the model service; unset takes the kind's own (``Kind/defaultEndpoint``).
        public var endpoint: String?
        /// Model id; unset takes the kind's own (``Kind/defaultModel``); required for `openai`.
        public var model: String?
        /// File holding the service's API key (mode 0600); required for `gemini`.
        public var apiKeyFile: String?
        /// Time from a segment's arrival to its guidance, retries included; then it is given up.
        public var timeoutMs = 8000
        /// Sends Gemini the segment re-encoded as H.264, for a service that refuses HEVC.
        public var transcodeToH264 = false
        /// Keyframes per segment sent to an `openai` model.
        public var keyframes = 3
        /// Frames per segment the `vision` analyzer looks at.
        public var visionFrames = 4

        public init() {}
    }

    public struct Usage: Sendable, Equatable {
        /// Seconds of video each device may still have analyzed; nil is unlimited.
        public var remainingSeconds: Int?

        public init() {}
    }

    /// Pairing cars to owners by a spoken code (RFC 8628) and the device credentials it gives.
    public struct PairingSection: Sendable, Equatable {
        public var enabled = false
        public var signingKeyFile = "signing.key"
        public var verificationURI: String?
        public var accessTokenSeconds = 600
        public var refreshTokenDays = 90

        public init() {}
    }

    /// Purchases of usage on the owners' pages.
    public struct Payments: Sendable, Equatable {
        public var provider: ProviderKind = .none
        public var products: [String] = []
        public var webhookSecretFile = "webhook.secret"
        /// The simulated provider on a server that listens beyond loopback: only when said so.
        public var allowSimulated = false

        public init() {}
    }

    public enum ProviderKind: String, CaseIterable, Sendable {
        case none
        case simulated
    }

    /// The clips cars upload for their owners (incidents, parking events, `protect`).
    public struct Clips: Sendable, Equatable {
        /// Folder the clip store keeps them in; nil takes none.
        public var dir: String?
        /// Largest clip file accepted.
        public var maxFileMegabytes = StreamServer.Settings.standard.maxClipFileBytes >> 20
        /// What one car's clips may take of the store.
        public var maxMegabytesPerCar = 4096
        /// What the clips of all one owner's cars may take of the store.
        public var maxMegabytesPerOwner = StreamServer.Settings.standard.maxClipBytesPerOwner >> 20
        /// Clips are deleted this many days after they came.
        public var retentionDays = 30

        public init() {}
    }

    /// The mail relay owners' impact mails go through (``ImpactMail``).
    public struct Mail: Sendable, Equatable {
        /// `HOST:PORT` of the SMTP relay; nil sends no mail.
        public var relay: String?
        /// The address mails come from; required with `relay`.
        public var from: String?
        public var starttls: StartTLS = .whenOffered
        /// AUTH PLAIN's user name, with `passwordFile`; only ever sent over TLS.
        public var username: String?
        public var passwordFile: String?
        /// CA certificates (PEM) the relay's certificate may be signed by, beside the system's.
        public var caFile: String?
        public var maxPerCarPerHour = 4
        /// To connect to the relay, and for each of its replies.
        public var timeoutMs = 30_000

        public init() {}
    }

    /// When the mail relay's connection is encrypted (STARTTLS, RFC 3207).
    public enum StartTLS: String, CaseIterable, Sendable {
        /// Whenever the relay offers STARTTLS; in clear otherwise (then never with a password).
        case whenOffered
        /// Always: nothing is sent to a relay that does not offer it.
        case required
    }

    public struct Log: Sendable, Equatable {
        public var level: Logger.Level = .info

        public init() {}
    }

    /// Which analyzer answers segments.
    public enum Kind: String, CaseIterable, Sendable {
        /// Plays guidance items from `analyzer.scriptFile`.
        case scripted
        /// Google's Gemini API, the segment inline as video.
        case gemini
        /// An OpenAI-compatible `/v1/chat/completions` (llama-server, Ollama, vLLM), with keyframes.
        case openai
        /// On this machine's CPU: OpenCV's people detector and picture checks, no model service.
        case vision

        /// The endpoint used when `analyzer.endpoint` is unset.
        public var defaultEndpoint: String? {
            switch self {
            case .gemini: "https://generativelanguage.googleapis.com/v1beta"
            case .openai: "http://127.0.0.1:8080/v1"
            case .scripted, .vision: nil
            }
        }

        /// The model used when `analyzer.model` is unset.
        public var defaultModel: String? {
            switch self {
            case .gemini: "gemini-2.5-flash"
            case .openai, .scripted, .vision: nil
            }
        }
    }

    /// How the scripted analyzer picks the item for a segment.
    public enum Order: String, CaseIterable, Sendable {
        /// One item after another, in script order.
        case inOrder = "order"
        /// The item at the segment's seq modulo the number of items.
        case bySeq = "seq"
    }
}

// MARK: - Keys

extension ServerConfig {
    public static let keys: [ConfigKeyInfo<ServerConfig>] = [
        .string("server.host", \.server.host, type: "string", "Address to listen on; `0.0.0.0` listens on every interface."),
        .int("server.port", \.server.port, 0...65535, "TCP port to listen on; 0 picks a free port."),
        .optionalString(
            "server.tlsCertFile", \.server.tlsCertFile, type: "path",
            "TLS certificate chain (PEM); set together with server.tlsKeyFile, or neither for plain HTTP."),
        .optionalString(
            "server.tlsKeyFile", \.server.tlsKeyFile, type: "path",
            "Private key (PEM) of server.tlsCertFile; set together with it."),
        .string(
            "server.tokensFile", \.server.tokensFile, type: "path",
            "YAML mapping of bearer token → device id; only these tokens may connect."),
        .int(
            "server.idleTimeoutSeconds", \.server.idleTimeoutSeconds, 1...3600,
            "Seconds a session may be silent (no message, no pong) before it is closed with 4001; the server pings once half way."),
        .optionalString(
            "server.keepDir", \.server.keepDir, type: "path",
            "Folder each verified segment is also written to, as DEVICE-STREAM-SEQ.mp4 (the agent's stream id; characters other than letters, digits, ., _ and - become _); unset keeps none."
        ),
        .int(
            "server.maxSegmentBytes", \.server.maxSegmentBytes, 65_536...268_435_456,
            "Largest segment accepted, in bytes; a header announcing more is refused (bad_segment) before any byte is buffered."),
        .int(
            "server.handshakeTimeoutMs", \.server.handshakeTimeoutMs, 100...600_000,
            "Milliseconds a new connection has to send its whole upgrade request (TLS handshake included); then it is closed."),
        .int(
            "server.maxConnections", \.server.maxConnections, 1...1_000_000,
            "Connections open at once; past it, requests are answered HTTP 503 with Retry-After (server.retryAfterSeconds)."),
        .int(
            "server.maxConnectionsPerDevice", \.server.maxConnectionsPerDevice, 1...64,
            "Stream connections one device (one token) may hold at once; a handover briefly needs two. Past it, the upgrade is answered HTTP 429 with Retry-After (server.retryAfterSeconds)."
        ),
        .int(
            "server.closeTimeoutMs", \.server.closeTimeoutMs, 100...60_000,
            "Milliseconds a peer has to answer a close the server sent (idle, superseded, quota); then the connection is closed whatever it does."
        ),
        .int(
            "server.maxInFlightMegabytes", \.server.maxInFlightMegabytes, 1...65_536,
            "MiB of segments being received at once, over all sessions (each takes its segment's size when its header comes). Past it, sessions wait their turn and their sockets are not read: the cars' bytes wait in the network, not in the server's memory."
        ),
        .int(
            "server.maxUpgradesInProgress", \.server.maxUpgradesInProgress, 1...100_000,
            "Stream sessions starting at once (from the upgrade request to the session's welcome). Past it, upgrades are answered HTTP 503 with Retry-After, so a fleet that comes back at once is started at the rate the server can start it."
        ),
        .int(
            "server.retryAfterSeconds", \.server.retryAfterSeconds, 1...3600,
            "Seconds a refusal for capacity (HTTP 503 or 429) asks an agent to wait: each refusal says a random number from this to twice this, so refused cars come back spread out."
        ),
        .choice(
            "analyzer.kind", \.analyzer.kind,
            "Analyzer that answers segments: `scripted` plays analyzer.scriptFile; `gemini` asks Google's Gemini API with the segment; `openai` asks an OpenAI-compatible server with keyframes; `vision` looks for people and an unusable picture on this machine's CPU."
        ),
        .optionalString(
            "analyzer.scriptFile", \.analyzer.scriptFile, type: "path",
            "YAML script of guidance items for `scripted`; required for that kind."),
        .choice(
            "analyzer.order", \.analyzer.order,
            "`order` plays the script's items one after another; `seq` picks item (segment seq mod item count)."),
        .optionalString(
            "analyzer.endpoint", \.analyzer.endpoint, type: "URL",
            "Base URL of the model service; unset is `\(Kind.gemini.defaultEndpoint ?? "")` (gemini) or `\(Kind.openai.defaultEndpoint ?? "")` (openai)."
        ),
        .optionalString(
            "analyzer.model", \.analyzer.model, type: "string",
            "Model id; unset is `\(Kind.gemini.defaultModel ?? "")` for gemini; required for openai (the name the server knows the model by)."
        ),
        .optionalString(
            "analyzer.apiKeyFile", \.analyzer.apiKeyFile, type: "path",
            "File holding the API key (mode 0600, no group or other access; never logged); required for gemini, optional for openai."),
        .int(
            "analyzer.timeoutMs", \.analyzer.timeoutMs, 500...60_000,
            "Milliseconds from a segment's arrival to its guidance, retries included; after it the segment gets none."),
        .bool(
            "analyzer.transcodeToH264", \.analyzer.transcodeToH264,
            "gemini: send the segment re-encoded as H.264 (libavcodec), for a service that refuses HEVC."),
        .int("analyzer.keyframes", \.analyzer.keyframes, 2...4, "openai: frames of each segment sent as JPEG images."),
        .int(
            "analyzer.visionFrames", \.analyzer.visionFrames, 1...25,
            "vision: frames of each segment looked at (spread over it); each costs tens to hundreds of milliseconds of CPU."),
        .optionalInt(
            "usage.remainingSeconds", \.usage.remainingSeconds, 0...100_000_000,
            "Seconds of video each device may have analyzed before it is closed as over quota; unset is unlimited."),
        .bool(
            "pairing.enabled", \.pairing.enabled,
            "Cars without a token pair themselves to an owner's account by a spoken code (`POST /oauth/device_authorization`, `POST /oauth/token`); static tokens keep working."
        ),
        .string(
            "pairing.signingKeyFile", \.pairing.signingKeyFile, type: "path",
            "Key that signs device access tokens (mode 0600; the same file on every instance; a relative path is in $STATE_DIRECTORY when systemd sets it); created with a random key if missing."
        ),
        .optionalString(
            "pairing.verificationURI", \.pairing.verificationURI, type: "URL",
            "Page where an owner types a car's code, as cars are told; unset is this server's `/pair` at the host name the car used (set it behind a proxy that changes the scheme or the path)."
        ),
        .int(
            "pairing.accessTokenSeconds", \.pairing.accessTokenSeconds, 60...86_400,
            "Lifetime of a paired car's access token, presented at the stream's upgrade."),
        .int(
            "pairing.refreshTokenDays", \.pairing.refreshTokenDays, 1...3650,
            "Days a refresh token stays valid unused; every use replaces it."),
        .choice(
            "payments.provider", \.payments.provider,
            "Payment provider of the owners' Buy usage page: `none` offers nothing; `simulated` is a provider page of this server with Pay and Decline that sends signed webhooks, for trying the flow with no network."
        ),
        .list(
            "payments.products", \.payments.products,
            "What owners can buy, each `NAME=SECONDS=PRICE` (e.g. `1 hour=3600=4.99 EUR`): seconds of analysed video added to a car once the provider's webhook says it was paid."
        ),
        .bool(
            "payments.allowSimulated", \.payments.allowSimulated,
            "Lets the simulated provider run on a server that listens beyond loopback (a demo on a network): anyone signed in can then credit usage without paying. Without it such a server refuses to start."
        ),
        .string(
            "payments.webhookSecretFile", \.payments.webhookSecretFile, type: "path",
            "Secret the provider signs webhooks with (mode 0600; a relative path is in $STATE_DIRECTORY when systemd sets it); created with a random secret if missing (simulated)."
        ),
        .optionalString(
            "clips.dir", \.clips.dir, type: "path",
            "Folder the clips cars upload are kept in, DEVICE/CLIP/ (several instances share one folder, on storage all of them mount); unset takes no clips (a car's `clip` is answered bad_clip)."
        ),
        .int(
            "clips.maxFileMegabytes", \.clips.maxFileMegabytes, 1...1024,
            "Largest clip file (one evidence segment) accepted, in megabytes; a clip announcing a larger one is refused before any byte is read."
        ),
        .int(
            "clips.maxMegabytesPerCar", \.clips.maxMegabytesPerCar, 1...1_048_576,
            "What one car's clips may take of the store, in megabytes (announced sizes of every clip it keeps); a clip that would go past it is refused (bad_clip) until older ones are deleted."
        ),
        .int(
            "clips.maxMegabytesPerOwner", \.clips.maxMegabytesPerOwner, 1...1_048_576,
            "What the clips of all one owner's cars may take of the store, in megabytes; a clip that would go past it is refused (bad_clip, the car keeps it and offers it again on its next session) and the owner's Events page says their storage is full."
        ),
        .int(
            "clips.retentionDays", \.clips.retentionDays, 1...3650,
            "Clips are deleted this many days after the car sent them, whole or not (checked every hour, by every instance); an owner deletes one sooner on its event page."
        ),
        .optionalString(
            "mail.relay", \.mail.relay, type: "HOST:PORT",
            "SMTP relay that e-mails owners when a parked car of theirs records an impact (they turn it on in their settings), e.g. `smtp.example.org:587`; unset sends no mail, and the settings page says the operator has not set up e-mail. Needs pairing.enabled and clips.dir."
        ),
        .optionalString(
            "mail.from", \.mail.from, type: "address",
            "Address the mails come from, e.g. `dashcam@example.org`; required with mail.relay."),
        .choice(
            "mail.starttls", \.mail.starttls,
            "`whenOffered`: encrypt (STARTTLS) whenever the relay offers it, the relay's certificate verified for its host name; `required`: send nothing to a relay that does not offer it."
        ),
        .optionalString(
            "mail.username", \.mail.username, type: "string",
            "User name for the relay's AUTH PLAIN, set together with mail.passwordFile; sent only over TLS (a relay without STARTTLS gets nothing)."
        ),
        .optionalString(
            "mail.passwordFile", \.mail.passwordFile, type: "path",
            "File holding the relay's password (first line; mode 0600; never logged); set together with mail.username."),
        .optionalString(
            "mail.caFile", \.mail.caFile, type: "path",
            "CA certificate(s) (PEM) the relay's certificate may be signed by, besides the system's trust store."),
        .int(
            "mail.maxPerCarPerHour", \.mail.maxPerCarPerHour, 1...60,
            "Impact mails about one car within any hour; more are logged, not sent."),
        .int(
            "mail.timeoutMs", \.mail.timeoutMs, 1000...300_000,
            "Milliseconds to connect to the relay, and for each of its replies; a send that fails for a reason that may pass is tried twice more (10 s, then 60 s later)."
        ),
        .choice("log.level", \.log.level, "Least severe log level that is printed."),
        .string(
            "ledger", \.ledger, type: "sqlite:PATH or postgres://…",
            "Usage ledger: `sqlite:PATH` (one server; a relative PATH is in $STATE_DIRECTORY when systemd sets it) or `postgres://USER@HOST:PORT/DB` (instances sharing ledger and sessions)."
        )
    ]

    /// Environment variables that set keys start with this, e.g. `GUIDANCE_SERVER_PORT`.
    public static let environmentPrefix = "GUIDANCE"

    /// Whether `host` is an address only this machine reaches.
    static func isLoopbackHost(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    /// Checks between keys, run by `load` after every key is read.
    public func validate() throws(ConfigError) {
        switch (server.tlsCertFile, server.tlsKeyFile) {
        case (.some, nil):
            throw .missingKey(
                "server.tlsKeyFile", reason: "server.tlsCertFile is set; TLS needs both, or neither for plain HTTP")
        case (nil, .some):
            throw .missingKey(
                "server.tlsCertFile", reason: "server.tlsKeyFile is set; TLS needs both, or neither for plain HTTP")
        default:
            break
        }
        _ = try ledgerLocation()
        if analyzer.kind == .scripted, analyzer.scriptFile == nil {
            throw .missingKey(
                "analyzer.scriptFile", reason: "analyzer.kind is 'scripted'; set it to the YAML script to play")
        }
        if analyzer.kind == .gemini, analyzer.apiKeyFile == nil {
            throw .missingKey(
                "analyzer.apiKeyFile", reason: "analyzer.kind is 'gemini'; set it to a file (mode 0600) holding the Gemini API key")
        }
        if let endpoint = analyzer.endpoint {
            let scheme = endpoint.split(separator: ":", maxSplits: 1).first.map { $0.lowercased() }
            guard scheme == "http" || scheme == "https", endpoint.contains("://"), URL(string: endpoint)?.host != nil else {
                throw .invalidOption(
                    "analyzer.endpoint", endpoint, "an http:// or https:// URL, such as https://generativelanguage.googleapis.com/v1beta")
            }
        }
        if payments.provider == .simulated, !payments.allowSimulated, !Self.isLoopbackHost(server.host) {
            throw .invalidOption(
                "payments.provider", "simulated",
                "none on a server that listens on \(server.host) (beyond loopback): the simulated provider lets anyone signed in credit usage without paying. For a demo on a network, set payments.allowSimulated: true"
            )
        }
        if analyzer.kind == .openai, analyzer.model == nil {
            throw .missingKey("analyzer.model", reason: "analyzer.kind is 'openai'; set it to the model id the server serves")
        }
        try validateMail()
    }
}
