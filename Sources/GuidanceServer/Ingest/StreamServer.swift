import Hummingbird
import HummingbirdTLS
import HummingbirdCore
import HummingbirdWebSocket
import Foundation
import GuidanceProtocol
public import Logging
public import ServiceLifecycle
import NIOCore
import Synchronization
import HummingbirdAuth

/// The request context of the server's routes: Hummingbird's, plus the connection's channel, where
/// a session finds its ``ConnectionActivity``.
///
/// The channel is held weakly. An upgrade stores the context in its own `webSocket` reference
/// (HummingbirdWebSocket's router sets the reference's value to a copy of the context), a cycle that
/// is never broken: a strong reference here kept every upgraded connection's channel, with its
/// buffers, for the life of the process. While the connection is open, NIO holds the channel.
struct GuidanceRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<Self>
    private let weakChannel: WeakChannel
    var channel: (any Channel)? { weakChannel.channel }

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        weakChannel = WeakChannel(source.channel)
    }

    final class WeakChannel: Sendable {
        weak let channel: (any Channel)?
        init(_ channel: any Channel) { self.channel = channel }
    }
}

/// The reference guidance server: `GET /v1/stream` upgraded to a WebSocket for authorized devices.
public struct StreamServer: Sendable {
    public struct Settings: Sendable {
        public var host: String
        public var port: Int
        /// PEM certificate chain and key; both or neither.
        public var tls: (certificateFile: String, keyFile: String)?
        public var idleTimeoutSeconds: Int
        /// Folder where verified segments are kept, if any.
        public var keepDir: String?
        /// Seconds of guidance each device starts with; `nil` is unlimited.
        public var usageSeconds: Int?
        /// Largest segment accepted, in bytes.
        public var maxSegmentBytes: Int
        /// Time a connection has to complete its first request (the upgrade), TLS included.
        public var handshakeTimeoutMs: Int
        /// Connections open at once; more are answered 503 with `Retry-After`.
        public var maxConnections: Int
        /// Stream connections one device may hold at once (a handover briefly needs two); more are
        /// answered 429 with `Retry-After`.
        public var maxConnectionsPerDevice: Int
        /// Time a peer has to answer a close the server sent (or to take its last words); then
        /// the socket is closed whatever it does.
        public var closeTimeoutMs: Int
        public var closeDeadline: Duration { .milliseconds(closeTimeoutMs) }
        /// Where the clips cars upload are kept; nil takes none.
        public var clips: (any ClipStore)?
        /// Largest clip file accepted, in bytes.
        public var maxClipFileBytes: Int
        /// What the clips of one owner's cars may take of the store, in bytes (``ClipQuota``).
        public var maxClipBytesPerOwner: Int
        /// Tells owners who asked for it of a parked car's impact (`mail.*`); nil: no mail.
        public var impactMail: ImpactMail?
        /// Bytes of segments being received at once, server-wide (``InFlightBudget``); past it,
        /// sessions wait for room and their sockets are not read.
        public var maxInFlightBytes: Int
        /// Stream sessions starting at once (upgrade to `welcome`); more upgrades are answered 503.
        public var maxUpgradesInProgress: Int
        /// What a refusal for capacity asks the agent to wait: this to twice this, in seconds.
        public var retryAfterSeconds: Int

        public init(
            host: String = "127.0.0.1", port: Int = 8080, tls: (certificateFile: String, keyFile: String)? = nil,
            idleTimeoutSeconds: Int = 30, keepDir: String? = nil, usageSeconds: Int? = nil,
            maxSegmentBytes: Int = 8 << 20, handshakeTimeoutMs: Int = 5000, maxConnections: Int = 1024,
            maxConnectionsPerDevice: Int = 4, closeTimeoutMs: Int = 3000,
            clips: (any ClipStore)? = nil, maxClipFileBytes: Int = 64 << 20, maxClipBytesPerOwner: Int = 8192 << 20,
            impactMail: ImpactMail? = nil,
            // Well inside the unit's `MemoryMax` (2 GiB). Short waits: the cars of a dead
            // instance must be streaming on another within seconds.
            maxInFlightBytes: Int = 128 << 20, maxUpgradesInProgress: Int = 256, retryAfterSeconds: Int = 2
        ) {
            self.maxInFlightBytes = maxInFlightBytes
            self.maxUpgradesInProgress = maxUpgradesInProgress
            self.retryAfterSeconds = retryAfterSeconds
            self.clips = clips
            self.impactMail = impactMail
            self.maxClipFileBytes = maxClipFileBytes
            self.maxClipBytesPerOwner = maxClipBytesPerOwner
            self.host = host
            self.port = port
            self.tls = tls
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.keepDir = keepDir
            self.usageSeconds = usageSeconds
            self.maxSegmentBytes = maxSegmentBytes
            self.handshakeTimeoutMs = handshakeTimeoutMs
            self.maxConnections = maxConnections
            self.maxConnectionsPerDevice = maxConnectionsPerDevice
            self.closeTimeoutMs = closeTimeoutMs
        }

        /// The defaults, for the configuration's.
        static let standard = Settings()

        /// Where this server reaches itself on `port` (the simulated payment provider's webhook):
        /// its own host, or loopback when it listens on every address.
        func ownURL(port: Int) -> String {
            let address =
                switch host {
                case "", "0.0.0.0": "127.0.0.1"
                case "::": "[::1]"
                case let ipv6 where ipv6.contains(":"): "[\(ipv6)]"
                case let name: name
                }
            return "\(tls == nil ? "http" : "https")://\(address):\(port)"
        }
    }

    public let settings: Settings
    public let tokens: StaticDeviceTokens
    public let analyzer: any SegmentAnalyzer
    public let logger: Logger
    public let metrics: ServerMetrics
    /// What each device was credited and spent; survives restarts.
    public let ledger: any UsageLedger
    /// Who owns each device's session: in memory for one instance, in PostgreSQL for several.
    public let leases: any SessionLeases
    /// What must run beside the server for ledger and leases (a PostgreSQL client, a listener).
    public let services: [any Service]
    /// Pairing by spoken code and the device credentials it gives; `nil`: static tokens only.
    public let pairing: Pairing?
    /// The sessions open here, shared by the application and ``restartNotice``.
    let sessions = LiveSessions()
    /// Room for the segments being received, shared by every session.
    let budget: InFlightBudget

    public init(
        settings: Settings, tokens: StaticDeviceTokens, analyzer: any SegmentAnalyzer, ledger: any UsageLedger,
        leases: any SessionLeases = LocalLeases(), services: [any Service] = [], pairing: Pairing? = nil, logger: Logger,
        metrics: ServerMetrics = ServerMetrics()
    ) {
        self.pairing = pairing
        self.settings = settings
        self.tokens = tokens
        self.analyzer = analyzer
        self.ledger = ledger
        self.leases = leases
        self.services = services
        self.logger = logger
        self.metrics = metrics
        budget = InFlightBudget(capacity: max(settings.maxInFlightBytes, 1), metrics: metrics, logger: logger)
    }

    /// Closes every open session with 1012 at a graceful shutdown: to run beside the
    /// ``ServerApplication``, after it in the service group, so that it goes first (``RestartNotice``).
    public var restartNotice: RestartNotice {
        RestartNotice(sessions: sessions, deadline: settings.closeDeadline, logger: logger)
    }

    /// The device a request's `Authorization` names: a static token from the tokens file, or a
    /// paired device's access token (unless the device was unpaired here).
    func device(authorization: String?) -> String? {
        tokens.device(authorization: authorization) ?? accessClaims(authorization)?.sub
    }

    /// A paired device's access token: its claims, unless the device was unpaired here.
    func accessClaims(_ authorization: String?) -> AccessTokens.Claims? {
        guard let pairing, let authorization, authorization.hasPrefix("Bearer "),
            let claims = pairing.tokens.verify(String(authorization.dropFirst(7)), nowSeconds: pairing.now() / 1000),
            !pairing.unpaired.contains(claims.sub)
        else { return nil }
        return claims
    }

    /// The rules every connection is held to before it reaches a route (``UpgradeAuthGate``).
    var upgradeRules: UpgradeAuthGate.Rules {
        UpgradeAuthGate.Rules(
            path: GuidanceProtocol.path, device: { [self] in device(authorization: $0) },
            handshakeTimeout: .milliseconds(Int64(settings.handshakeTimeoutMs)),
            retryAfterSeconds: settings.retryAfterSeconds, maxPerDevice: settings.maxConnectionsPerDevice,
            maxStarting: settings.maxUpgradesInProgress, metrics: metrics, logger: logger)
    }

    /// What runs beside the sessions: the ledger's and leases' own, and the watches that act on
    /// every open session (superseded elsewhere; tokens, unpairing and usage).
    var sessionServices: [any Service] {
        services + [
            SupersedeService(leases: leases, sessions: sessions, logger: logger),
            SessionChecks(sessions: sessions, beforeEach: { [tokens] in tokens.refresh() })
        ]
    }

    /// The stream route, `GuidanceProtocol.path`: a device's WebSocket, one ``StreamSession``.
    func addRoutes(to router: Router<GuidanceRequestContext>) {
        let sessions = self.sessions
        let ledger = self.ledger, leases = self.leases
        let tokens = self.tokens, settings = self.settings, analyzer = self.analyzer, logger = self.logger, metrics = self.metrics
        let budget = self.budget
        let clock = pairing?.now, unpaired = pairing?.unpaired
        let owners = pairing?.owners
        let server = self
        router.ws(RouterPath(stringLiteral: GuidanceProtocol.path)) { request, _ in
            // UpgradeAuthGate has already answered a bad token with 401; this is the second lock.
            server.device(authorization: request.headers[.authorization]) != nil ? .upgrade([:]) : .dontUpgrade
        } onUpgrade: { inbound, outbound, context in
            // However the session ends, the socket is gone within the close deadline: a peer that
            // never answers the close (or stopped reading) cannot keep its connection slot.
            guard let channel = context.requestContext.channel else { return }
            defer { channel.eventLoop.scheduleTask(in: .milliseconds(Int64(settings.closeTimeoutMs))) { channel.close(promise: nil) } }
            let authorization = context.request.headers[.authorization]
            // One look at the tokens file for both questions (each look is a `stat`).
            let staticDevice = tokens.device(authorization: authorization)
            // A paired device's access token, verified once for its device and its expiry.
            let claims = staticDevice == nil ? server.accessClaims(authorization) : nil
            guard let device = staticDevice ?? claims?.sub else { return }
            // What the session needs of its connection, on the connection's event loop.
            let (connection, credit) = try await channel.eventLoop.submit {
                try FrameUnmasker.install(on: channel)
                return (try ReadActivity.of(channel), try ReadCredit.install(on: channel))
            }.get()
            let activity = connection.activity
            // A static token stops working when it leaves the tokens file; a paired device's
            // session lasts while the stream does (its access token was checked at the upgrade).
            let byStaticToken = staticDevice != nil
            // Until when a paired device's session is authorized: its access token's expiry,
            // moved on by each `auth` message with a newer token of the same device.
            let window = AuthWindow(expiresAt: claims?.exp ?? Int64.max)
            let session = StreamSession(
                device: device, settings: settings, sessions: sessions, leases: leases, ledger: ledger,
                analyzer: analyzer, metrics: metrics, activity: activity,
                intake: .init(budget: budget, credit: credit, started: { connection.start.give() }),
                // Asked of every session on each of SessionChecks' ticks, which reads
                // the tokens file first (once, not once a session).
                stillAuthorized: {
                    byStaticToken
                        ? tokens.knownDevice(authorization: authorization) == device
                        : unpaired?.contains(device) != true && (clock?() ?? 0) / 1000 < window.expiresAt
                },
                observer: byStaticToken
                    ? nil
                    : owners.map { owners in
                        StreamSession.Observer(
                            opened: { try? await owners.seen(device: device, nowMs: clock?() ?? 0) },
                            guided: { text in try? await owners.recordGuidance(device: device, text: text, nowMs: clock?() ?? 0) },
                            clipAdmission: {
                                if unpaired?.contains(device) == true { return .refused("this car was unpaired") }
                                do {
                                    return try await ClipQuota.admission(
                                        device: device, owners: owners,
                                        limitBytes: settings.maxClipBytesPerOwner)
                                } catch {
                                    // The store's own checks still hold (clips.maxMegabytesPerCar).
                                    logger.error("cannot look up the car's owner for its clip: \(error)", metadata: ["device": "\(device)"])
                                    return .unlimited
                                }
                            },
                            tracked: { gps in
                                // An unpaired car's drive is nobody's (its trips were forgotten with it).
                                guard unpaired?.contains(device) != true else { return }
                                do {
                                    try await owners.recordTrack(
                                        device: device,
                                        points: TripRules.points(gps, nowMs: clock?() ?? Int64(Date().timeIntervalSince1970 * 1000)))
                                } catch {
                                    logger.error("cannot keep a segment's track: \(error)", metadata: ["device": "\(device)"])
                                }
                            })
                    },
                reauthorize: { token in
                    guard !byStaticToken, let claims = server.accessClaims("Bearer " + token), claims.sub == device else { return false }
                    window.extend(to: claims.exp)
                    return true
                },
                logger: logger)
            try await session.run(inbound: inbound, outbound: outbound)
        }
    }
}

/// Until when a paired device's session may stream (its access token's `exp`, in seconds).
final class AuthWindow: Sendable {
    private let until: Mutex<Int64>
    init(expiresAt: Int64) { until = Mutex(expiresAt) }
    var expiresAt: Int64 { until.withLock { $0 } }
    func extend(to expiresAt: Int64) { until.withLock { $0 = max($0, expiresAt) } }
}
