public import Hummingbird
import HummingbirdAuth
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import GuidanceProtocol
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// The guidance server as it runs: one Hummingbird application that mounts each part's routes and
/// runs each part's services. `guidance-server serve` builds it, and so do the tests.
///
/// | part | routes | folder |
/// | --- | --- | --- |
/// | the stream | `GET /v1/stream` (WebSocket), behind ``UpgradeAuthGate`` | `Ingest/`, `DeviceAuth/` |
/// | device pairing | `POST /oauth/device_authorization`, `POST /oauth/token` | `DeviceAuth/` (``PairingEndpoints``) |
/// | the owners' site and payments | `/signin`, `/`, `/pair`, `/devices/…`, `/events`, `/buy`, `/webhooks/payments/…` | `Owners/`, `Payments/` (``OwnerPages``) |
/// | metrics | `GET /metrics` | `Ingest/ServerMetrics.swift` |
///
/// Pairing and the owners' site are mounted when `pairing.enabled` is set (``StreamServer/pairing``).
public struct ServerApplication: Sendable {
    public let stream: StreamServer

    public init(stream: StreamServer) {
        self.stream = stream
    }

    /// The application; `onRunning` gets the bound port (useful with port 0).
    public func build(onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        let settings = stream.settings, logger = stream.logger, metrics = stream.metrics
        let router = Router(context: GuidanceRequestContext.self)
        // Every request: a failure logged and counted; plain HTTP refused where TLS is expected.
        router.add(middleware: ServerErrorLog(logger: logger, metrics: metrics))
        router.add(
            middleware: SecureTransport(
                always: settings.tls != nil || stream.pairing?.site?.secureCookies == true,
                peer: { $0.channel?.remoteAddress?.ipAddress }))
        // The parts.
        stream.addRoutes(to: router)
        // Where the simulated payment provider posts its webhooks: this server, once it listens.
        let listening = Mutex<String?>(nil)
        if let pairing = stream.pairing {
            pairing.endpoints(logger: logger).add(to: router)
            ownerSite(pairing, webhookBase: { listening.withLock { $0 } })?.add(to: router)
        }
        metrics.addRoute(to: router)

        // The session pings and checks liveness itself (StreamSession.watchIdle): pongs count.
        let webSocket = WebSocketServerConfiguration(
            maxFrameSize: GuidanceProtocol.maxMessageBytes + 1024, autoPing: .disabled, closeTimeout: settings.closeDeadline)
        let webSocketResponder = router.buildResponder()
        let rules = stream.upgradeRules
        let open = OpenConnections()
        // A bad token never gets a WebSocket: HTTP 401 at the upgrade.
        var server = HTTPServerBuilder { responder in
            AuthGatedChannel(
                base: HTTP1WebSocketUpgradeChannel(
                    responder: responder, webSocketResponder: webSocketResponder,
                    // Between requests on a kept-alive connection (a /metrics scraper, say), the
                    // same time as for the first one.
                    configuration: .init(http1: .init(idleTimeout: .milliseconds(Int64(settings.handshakeTimeoutMs))), ws: webSocket)),
                rules: rules, maxConnections: settings.maxConnections, open: open)
        }
        if let tls = settings.tls {
            let configuration = TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(tls.certificateFile).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: tls.keyFile, format: .pem)))
            server = try .tls(server, tlsConfiguration: configuration)
        }
        return Application(
            router: router, server: server,
            // A fleet reconnecting at once (a server restart, a cell tower back) is thousands of
            // connections in a second: with Hummingbird's 256 the accept queue overflows and the
            // kernel drops handshakes, which the cars retry a second or more later. 4096 is what
            // Linux allows by default (net.core.somaxconn caps it).
            configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: "guidance-server", backlog: 4096),
            services: stream.sessionServices + (stream.pairing.flatMap(unpairWatch) ?? []),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? settings.port
                listening.withLock { $0 = settings.ownURL(port: port) }
                await onRunning(port)
            },
            logger: logger)
    }

    /// The owners' pages, payments among them, when the pairing store keeps owners.
    private func ownerSite(_ pairing: Pairing, webhookBase: @escaping @Sendable () -> String?) -> OwnerPages? {
        guard let owners = pairing.owners, let site = pairing.site else { return nil }
        let settings = stream.settings
        let sessions = SessionStorage<WebSession>(
            site.sessionDriver,
            configuration: .init(
                sessionCookieParameters: .init(
                    name: OwnerPages.sessionCookie, secure: site.secureCookies,
                    sameSite: .strict),
                keyPrefix: OwnerPages.sessionKeyPrefix))
        return OwnerPages(
            store: owners, ledger: stream.ledger, sessions: sessions, library: site.library, products: site.products,
            provider: site.provider, allowance: site.allowance, secureCookies: site.secureCookies,
            unpaired: pairing.unpaired, metrics: stream.metrics, webhookBase: webhookBase, clips: settings.clips,
            clipBytesPerOwner: settings.maxClipBytesPerOwner,
            shareLinks: ShareLinks(tokens: pairing.tokens), publicOrigin: OwnerPages.origin(of: pairing.verificationURI),
            mailRelay: site.mailRelay, logger: stream.logger, now: pairing.now)
    }

    /// Hears of cars unpaired at another instance, when the store keeps owners (``UnpairWatch``).
    private func unpairWatch(_ pairing: Pairing) -> [any Service]? {
        pairing.owners.map { owners in
            [
                UnpairWatch(
                    store: owners, unpaired: pairing.unpaired, lookBackMs: pairing.tokens.lifetimeSeconds * 1000,
                    now: pairing.now, logger: stream.logger)
            ]
        }
    }
}

extension ServerMetrics {
    /// `GET /metrics`, in Prometheus text format.
    func addRoute(to router: Router<GuidanceRequestContext>) {
        router.get("/metrics") { [self] _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: exposition())))
        }
    }
}
