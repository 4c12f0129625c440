import Foundation
public import Logging
public import NIOCore
import NIOHTTP1
public import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

extension WebSocketConnection {
    /// Connects, upgrades and starts reading; cancelling the calling task closes the socket.
    public static func connect(
        _ options: WebSocketConnectOptions, logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    )
        async throws(WebSocketConnectFailure) -> WebSocketConnection
    {
        let target = try Target(options.url)
        let sslContext: NIOSSLContext?
        if target.secure {
            guard let tls = options.tls else { throw .failed("wss:// needs a TLS configuration") }
            do { sslContext = try NIOSSLContext(configuration: tls) } catch { throw .failed("TLS: \(error)") }
        } else {
            sslContext = nil
        }
        var headers = HTTPHeaders([("Host", target.hostHeader)])
        headers.add(contentsOf: options.headers)
        let request = HTTPRequestHead(version: .http1_1, method: .GET, uri: target.path, headers: headers)

        let loop = group.next()
        let attempt = ConnectAttempt(loop.makePromise())
        let tcp = SocketOptionLevel(IPPROTO_TCP)
        func tcpOption(_ name: CInt) -> ChannelOptions.Types.SocketOption { .init(level: tcp, name: SocketOptionName(name)) }
        ClientBootstrap(group: loop)
            .connectTimeout(TimeAmount(options.deadline))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelOption(tcpOption(TCP_KEEPIDLE), value: SocketOptionValue(max(1, options.keepaliveIdle.components.seconds)))
            .channelOption(tcpOption(TCP_KEEPINTVL), value: SocketOptionValue(max(1, options.keepaliveInterval.components.seconds)))
            .channelOption(tcpOption(TCP_KEEPCNT), value: SocketOptionValue(max(1, options.keepaliveCount)))
            .channelOption(tcpOption(TCP_USER_TIMEOUT), value: SocketOptionValue(options.userTimeout / .milliseconds(1)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: sslContext, serverHostname: target.host), position: .first)
                    }
                    let upgrade = try configureUpgrade(channel, request: request, maxMessageBytes: options.maxMessageBytes)
                    guard attempt.add(channel, upgrade: upgrade) else { throw CancellationError() }
                }
            }
            .connect(host: target.host, port: target.port)
            .whenComplete { result in
                switch result {
                case .success(let channel): attempt.connected(channel)
                case .failure(let error): attempt.finish(.failure(error))
                }
            }
        let timer = loop.scheduleTask(in: TimeAmount(options.deadline)) {
            attempt.finish(.failure(WebSocketConnectFailure.timedOut(options.deadline)))
        }
        let upgrade: Upgrade
        do {
            upgrade = try await withTaskCancellationHandler {
                try await attempt.result.futureResult.get()
            } onCancel: {
                attempt.finish(.failure(CancellationError()))
            }
            timer.cancel()
        } catch {
            timer.cancel()
            throw failure(error, options: options)
        }
        switch upgrade {
        case .refused(let status, let retryAfter):
            throw .refused(status: status, retryAfter: retryAfter)
        case .upgraded(let webSocket):
            logger.debug("websocket: connected to \(target.host):\(target.port)")
            return start(webSocket, logger: logger, maxMessageBytes: options.maxMessageBytes)
        }
    }

    struct Target {
        let host: String, port: Int, secure: Bool, path: String, hostHeader: String

        init(_ url: String) throws(WebSocketConnectFailure) {
            guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(),
                scheme == "ws" || scheme == "wss", var host = parts.host, !host.isEmpty
            else { throw .failed("not a ws:// or wss:// URL: \(url)") }
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.host = host
            secure = scheme == "wss"
            port = parts.port ?? (secure ? 443 : 80)
            path =
                (parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath)
                + (parts.percentEncodedQuery.map { "?\($0)" } ?? "")
            let name = host.contains(":") ? "[\(host)]" : host
            hostHeader = parts.port.map { "\(name):\($0)" } ?? name
        }
    }

    /// Adds the HTTP client with its upgrader, and the status recorder after the response decoder.
    static func configureUpgrade(
        _ channel: any Channel, request: HTTPRequestHead,
        maxMessageBytes: Int
    ) throws -> EventLoopFuture<Upgrade> {
        let response = UpgradeResponse()
        let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
            maxFrameSize: maxMessageBytes, enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    try operations.addHandler(
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 1024, maxAccumulatedFrameSize: maxMessageBytes))
                    try operations.addHandler(FrameControl())
                    return .upgraded(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                }
            })
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
            upgradeConfiguration: .init(
                upgradeRequestHead: request, upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    guard let (status, retryAfter) = response.value.withLock({ $0 }) else {
                        return channel.eventLoop.makeFailedFuture(ChannelError.inappropriateOperationForState)
                    }
                    return channel.eventLoop.makeSucceededFuture(.refused(status: status, retryAfter: retryAfter))
                }))
        configuration.leftOverBytesStrategy = .forwardBytes
        let operations = channel.pipeline.syncOperations
        let upgrade = try operations.configureUpgradableHTTPClientPipeline(configuration: configuration)
        let decoder = try operations.handler(type: ByteToMessageHandler<HTTPResponseDecoder>.self)
        try operations.addHandler(UpgradeResponseRecorder(response), position: .after(decoder))
        return upgrade
    }

    static func failure(_ error: any Error, options: WebSocketConnectOptions) -> WebSocketConnectFailure {
        switch error {
        case let failure as WebSocketConnectFailure: failure
        case is CancellationError: .failed("cancelled")
        case ChannelError.connectTimeout: .timedOut(options.deadline)
        case let error as NIOConnectionError:
            .failed(error.connectionErrors.last.map { "\($0.error)" } ?? "cannot resolve \(error.host)")
        case is NIOSSLError, is BoringSSLError: .failed("TLS: \(error)")
        case ChannelError.inappropriateOperationForState, ChannelError.eof:
            .failed("the connection closed before the upgrade finished")
        case let error as NIOHTTPClientUpgradeError: .failed("invalid upgrade response: \(error)")
        default: .failed("\(error)")
        }
    }

    /// How an upgrade attempt ended.
    enum Upgrade: Sendable {
        case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case refused(status: Int, retryAfter: Duration?)
    }
}
