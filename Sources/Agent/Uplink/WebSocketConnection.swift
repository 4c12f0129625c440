import Foundation
public import Logging
public import NIOCore
import NIOHTTP1
public import NIOPosix
public import NIOSSL
import NIOWebSocket
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where and how ``WebSocketConnection/connect(_:logger:group:)`` connects.
public struct WebSocketConnectOptions: Sendable {
    /// `ws://host[:port]/path` or `wss://…`.
    public var url: String
    /// Extra request headers, such as `Authorization`; their values are never logged.
    public var headers: [(String, String)]
    /// Required for `wss://` (the URL's host is the server name); unused for `ws://`.
    public var tls: TLSConfiguration?
    /// For connect, TLS handshake and HTTP upgrade together.
    public var deadline: Duration
    /// TCP_USER_TIMEOUT: how long sent data may stay unacknowledged before the kernel drops the connection.
    public var userTimeout: Duration
    /// TCP keepalive: first probe after this much silence, then every `keepaliveInterval`, `keepaliveCount` times.
    public var keepaliveIdle: Duration
    public var keepaliveInterval: Duration
    public var keepaliveCount: Int
    /// The largest inbound message, after reassembly; a larger one ends the connection with 1009.
    public var maxMessageBytes: Int

    public init(url: String, headers: [(String, String)] = [], tls: TLSConfiguration? = nil,
                deadline: Duration = .seconds(5), userTimeout: Duration = .seconds(10),
                keepaliveIdle: Duration = .seconds(5), keepaliveInterval: Duration = .seconds(2), keepaliveCount: Int = 3,
                maxMessageBytes: Int = 64 * 1024) {
        self.url = url
        self.headers = headers
        self.tls = tls
        self.deadline = deadline
        self.userTimeout = userTimeout
        self.keepaliveIdle = keepaliveIdle
        self.keepaliveInterval = keepaliveInterval
        self.keepaliveCount = keepaliveCount
        self.maxMessageBytes = maxMessageBytes
    }
}

/// Why no WebSocket opened.
public enum WebSocketConnectFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server answered the upgrade with this HTTP status instead of 101.
    case refused(status: Int, retryAfter: Duration?)
    /// The deadline passed before the upgrade finished; the socket is closed.
    case timedOut(Duration)
    /// Bad URL, DNS, TCP or TLS failure, an invalid upgrade answer, or cancellation.
    case failed(String)

    public var description: String {
        switch self {
        case .refused(let status, let retryAfter):
            "the server refused the upgrade with HTTP \(status)" + (retryAfter.map { " (retry after \($0))" } ?? "")
        case .timedOut(let deadline): "no WebSocket within \(deadline)"
        case .failed(let reason): reason
        }
    }
}

/// What arrives on an open connection.
public enum WebSocketInbound: Sendable, Equatable {
    /// A whole text message. One that is not valid UTF-8 is logged and skipped.
    case text(String)
    case binary([UInt8])
    /// The answer to a ping.
    case pong
    /// The connection ended; always the last element. `code` is the peer's close code (1005 for a close
    /// frame without one); `nil` when the socket closed without one or this side failed the
    /// connection (a message too big, a protocol error, too many unread messages): `reason` says why.
    case closed(code: UInt16?, reason: String)
}

/// A client WebSocket (RFC 6455) made of SwiftNIO parts.
///
/// Control frames are handled on the event loop: pings are answered, a close from the server is
/// answered and the socket closed. A send returns once the kernel has taken its frame, so a peer
/// that stops reading holds the sender. Nothing closes the socket implicitly: end it with
/// ``close(code:reason:grace:)`` or ``abort()``.
public final class WebSocketConnection: Sendable {
    /// Every message from the server, in order; finishes after `.closed`. If 256 messages wait
    /// unread, the connection is closed with 1008 (one slot stays free for `.closed`).
    public let inbound: AsyncStream<WebSocketInbound>
    static let inboundLimit = 256

    private let channel: any Channel
    private let reader: Task<Void, Never>
    private let closing = Mutex(false)

    private init(channel: any Channel, inbound: AsyncStream<WebSocketInbound>, reader: Task<Void, Never>) {
        self.channel = channel
        self.inbound = inbound
        self.reader = reader
    }

    /// Connects, upgrades and starts reading; cancelling the calling task closes the socket.
    public static func connect(_ options: WebSocketConnectOptions, logger: Logger,
                               group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton)
        async throws(WebSocketConnectFailure) -> WebSocketConnection {
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

    public func send(text: String) async throws {
        try await write(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(string: text)))
    }

    /// One binary message; the protocol keeps these to 64 KiB.
    public func send(binary: ArraySlice<UInt8>) async throws {
        try await write(WebSocketFrame(fin: true, opcode: .binary, data: channel.allocator.buffer(bytes: binary)))
    }

    /// Sends a ping; its answer arrives as `.pong` on ``inbound``.
    public func ping() async throws {
        try await write(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer()))
    }

    /// Sends a close frame once (nothing at all is written after it: RFC 6455 §5.5.1; later sends
    /// throw), waits at most `grace` for the peer's close frame or the socket to close, then closes
    /// the socket. Returns when the socket is closed and `.closed` is on ``inbound``.
    public func close(code: UInt16, reason: String, grace: Duration) async {
        if closing.withLock({ closing in defer { closing = true }; return !closing }) {
            channel.writeAndFlush(Self.closeFrame(code: code, reason: reason), promise: nil)
        }
        let channel = channel
        let timer = channel.eventLoop.scheduleTask(in: TimeAmount(grace)) { channel.close(promise: nil) }
        try? await channel.closeFuture.get()
        timer.cancel()
        await reader.value
    }

    /// Closes the socket now; blocked and pending sends fail at once.
    public func abort() {
        closing.withLock { $0 = true }
        channel.close(promise: nil)
    }

    /// Returns once the kernel has taken the frame, so a peer that stops reading stops the sender
    /// and nothing piles up here; cancelling the waiting task closes the socket.
    private func write(_ frame: WebSocketFrame) async throws {
        guard !closing.withLock({ $0 }) else { throw ChannelError.outputClosed }
        let channel = channel
        let written = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(frame, promise: written)
        try await withTaskCancellationHandler {
            try await written.futureResult.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }

    static func closeFrame(code: UInt16, reason: String) -> WebSocketFrame {
        var reason = Substring(reason)
        while reason.utf8.count > 123 { reason = reason.dropLast() }  // a control frame carries at most 125 bytes
        var data = ByteBuffer(integer: code)
        data.writeString(String(reason))
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
    }

    // MARK: - Reading

    private static func start(_ webSocket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, logger: Logger,
                              maxMessageBytes: Int) -> WebSocketConnection {
        let (inbound, sink) = AsyncStream.makeStream(of: WebSocketInbound.self,
                                                     bufferingPolicy: .bufferingOldest(inboundLimit + 1))
        let reader = Task {
            let last = try? await webSocket.executeThenClose { frames, _ in
                await read(frames, into: sink, channel: webSocket.channel, logger: logger, maxMessageBytes: maxMessageBytes)
            }
            sink.yield(last ?? .closed(code: nil, reason: "the connection dropped"))
            sink.finish()
        }
        return WebSocketConnection(channel: webSocket.channel, inbound: inbound, reader: reader)
    }

    /// Hands messages to `sink` until the connection ends; returns the `.closed` that ends it.
    private static func read(_ frames: NIOAsyncChannelInboundStream<WebSocketFrame>,
                             into sink: AsyncStream<WebSocketInbound>.Continuation,
                             channel: any Channel, logger: Logger, maxMessageBytes: Int) async -> WebSocketInbound {
        var overflowing = false
        do {
            for try await frame in frames {
                let message: WebSocketInbound
                switch frame.opcode {
                case .text:
                    guard let text = String(validating: frame.unmaskedData.readableBytesView, as: UTF8.self) else {
                        logger.warning("websocket: skipped a text message that is not valid UTF-8")
                        continue
                    }
                    message = .text(text)
                case .binary: message = .binary(Array(frame.unmaskedData.readableBytesView))
                case .pong: message = .pong
                case .connectionClose:
                    var data = frame.unmaskedData
                    let code = data.readInteger(as: UInt16.self) ?? 1005
                    return .closed(code: code, reason: data.readString(length: data.readableBytes) ?? "")
                default: continue
                }
                if overflowing { continue }
                if case .enqueued(let remaining) = sink.yield(message), remaining <= 1 {
                    logger.warning("websocket: \(inboundLimit) messages wait unread; closing with 1008")
                    channel.triggerUserOutboundEvent(FrameControl.Failure.overflow, promise: nil)
                    overflowing = true
                }
            }
            return .closed(code: nil, reason: "the connection dropped")
        } catch FrameControl.Failure.tooBig {
            return .closed(code: nil, reason: "a message over \(maxMessageBytes) bytes")
        } catch FrameControl.Failure.protocolError {
            return .closed(code: nil, reason: "a protocol error from the peer")
        } catch FrameControl.Failure.overflow {
            return .closed(code: nil, reason: "\(inboundLimit) messages waited unread")
        } catch {
            return .closed(code: nil, reason: "\(error)")
        }
    }

    // MARK: - Connecting

    private struct Target {
        let host: String, port: Int, secure: Bool, path: String, hostHeader: String

        init(_ url: String) throws(WebSocketConnectFailure) {
            guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(),
                  scheme == "ws" || scheme == "wss", var host = parts.host, !host.isEmpty
            else { throw .failed("not a ws:// or wss:// URL: \(url)") }
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.host = host
            secure = scheme == "wss"
            port = parts.port ?? (secure ? 443 : 80)
            path = (parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath)
                + (parts.percentEncodedQuery.map { "?\($0)" } ?? "")
            let name = host.contains(":") ? "[\(host)]" : host
            hostHeader = parts.port.map { "\(name):\($0)" } ?? name
        }
    }

    /// Adds the HTTP client with its upgrader, and the status recorder after the response decoder.
    private static func configureUpgrade(_ channel: any Channel, request: HTTPRequestHead,
                                         maxMessageBytes: Int) throws -> EventLoopFuture<Upgrade> {
        let response = UpgradeResponse()
        let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
            maxFrameSize: maxMessageBytes, enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    try operations.addHandler(NIOWebSocketFrameAggregator(
                        minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 1024, maxAccumulatedFrameSize: maxMessageBytes))
                    try operations.addHandler(FrameControl())
                    return .upgraded(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                }
            })
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: .init(
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

    private static func failure(_ error: any Error, options: WebSocketConnectOptions) -> WebSocketConnectFailure {
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
}

private enum Upgrade: Sendable {
    case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
    case refused(status: Int, retryAfter: Duration?)
}

/// One connect: happy-eyeballs candidates, each with its upgrade; the first outcome (upgrade,
/// failure, deadline or cancellation) decides it, and every channel is closed unless it upgraded.
private final class ConnectAttempt: Sendable {
    let result: EventLoopPromise<Upgrade>
    private struct State {
        var candidates: [(channel: any Channel, upgrade: EventLoopFuture<Upgrade>)] = []
        var over = false
    }
    private let state = Mutex(State())

    init(_ result: EventLoopPromise<Upgrade>) { self.result = result }

    /// False once the attempt is over: the caller fails the candidate.
    func add(_ channel: any Channel, upgrade: EventLoopFuture<Upgrade>) -> Bool {
        state.withLock { state in
            state.candidates.append((channel, upgrade))
            return !state.over
        }
    }

    /// The connect picked `channel`: its upgrade decides.
    func connected(_ channel: any Channel) {
        let upgrade = state.withLock { $0.candidates.first { $0.channel === channel }?.upgrade }
        guard let upgrade else { return finish(.failure(ChannelError.inappropriateOperationForState)) }
        upgrade.whenComplete { self.finish($0) }
    }

    func finish(_ outcome: Result<Upgrade, any Error>) {
        let (won, channels) = state.withLock { state in
            defer { state.over = true }
            return (!state.over, state.candidates.map(\.channel))
        }
        if won { result.completeWith(outcome) }
        switch (won, outcome) {
        case (true, .success(.upgraded)): break
        case (true, _): channels.forEach { $0.close(promise: nil) }
        case (false, .success(.upgraded(let late))): late.channel.close(promise: nil)
        case (false, _): break
        }
    }
}

/// The upgrade response's status and `Retry-After`, noted before the upgrader sees the response.
private final class UpgradeResponse: Sendable {
    let value = Mutex<(status: Int, retryAfter: Duration?)?>(nil)
}

/// Sits right after the HTTP response decoder, notes the first response head and leaves the pipeline.
private final class UpgradeResponseRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    private let response: UpgradeResponse

    init(_ response: UpgradeResponse) { self.response = response }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else { return context.fireChannelRead(data) }
        let retryAfter = head.headers.first(name: "Retry-After").flatMap(Self.retryAfter)
        response.value.withLock { $0 = (Int(head.status.code), retryAfter) }
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// Delta-seconds or an HTTP-date (RFC 9110 §10.2.3); a date in the past is zero.
    static func retryAfter(_ value: String) -> Duration? {
        let value = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(value) { return seconds >= 0 ? .seconds(seconds) : nil }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = format.date(from: value) else { return nil }
        return .milliseconds(max(0, Int(date.timeIntervalSinceNow * 1000)))
    }
}

/// The control side of RFC 6455, on the event loop: masks every frame sent, answers pings,
/// answers a close and closes the socket, and fails every write after our close frame.
///
/// On an oversized message (1009), a protocol error (1002) or an overflowing reader (1008) it fails
/// the connection: sends the close, drops what still arrives, and closes the socket once the peer
/// does or after a second (closing with unread data would reset the connection and lose the close
/// frame). The reader learns why as the error that ends its stream.
private final class FrameControl: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    enum Failure: Error, Sendable { case tooBig, protocolError, overflow }
    private var closeSent = false
    private var failure: Failure?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .connectionClose:
            // Echo the peer's code (RFC 6455 §5.5.1) unless we sent a close already, then hang up.
            var payload = frame.unmaskedData
            send(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload.readSlice(length: 2) ?? ByteBuffer()),
                 context: context)
            if failure == nil { context.fireChannelRead(data) }
            context.close(promise: nil)
        case _ where failure != nil: break
        case .ping: send(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData), context: context)
        default: context.fireChannelRead(data)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var frame = unwrapOutboundIn(data)
        guard !closeSent else {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        if frame.opcode == .connectionClose { closeSent = true }
        frame.maskKey = .random()
        context.write(wrapOutboundOut(frame), promise: promise)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard case Failure.overflow = event else { return context.triggerUserOutboundEvent(event, promise: promise) }
        fail(.overflow, code: 1008, reason: "receiver overloaded", context: context)
        promise?.succeed()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard failure == nil else { return }  // the decoder's complaints about bytes after its error
        switch error {
        case NIOWebSocketError.invalidFrameLength, NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge,
             NIOWebSocketFrameAggregator.Error.tooManyFragments:
            fail(.tooBig, code: 1009, reason: "message too big", context: context)
        case is NIOWebSocketError, is NIOWebSocketFrameAggregator.Error:
            fail(.protocolError, code: 1002, reason: "protocol error", context: context)
        default:
            context.fireErrorCaught(error)
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let failure { context.fireErrorCaught(failure) }
        context.fireChannelInactive()
    }

    private func fail(_ failure: Failure, code: UInt16, reason: String, context: ChannelHandlerContext) {
        guard self.failure == nil else { return }
        self.failure = failure
        send(WebSocketConnection.closeFrame(code: code, reason: reason), context: context)
        let channel = context.channel
        context.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
    }

    private func send(_ frame: WebSocketFrame, context: ChannelHandlerContext) {
        guard !closeSent else { return }
        write(context: context, data: wrapOutboundOut(frame), promise: nil)
        context.flush()
    }
}
