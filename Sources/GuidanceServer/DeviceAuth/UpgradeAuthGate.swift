import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Guards each connection until its first request is complete, before the WebSocket upgrader sees
/// anything:
/// - over `maxConnections`, every request is answered 503 with `Retry-After`;
/// - an upgrade on the stream path while `maxStarting` sessions are starting already (upgrade
///   through `welcome`) is answered 503 with `Retry-After`, so that a fleet arriving at once is
///   started at the rate the server can start it and the rest come back later, spread out;
/// - an upgrade request on the stream path without a valid token is answered 401 (the upgrader
///   answers every refusal with 400);
/// - a connection whose first request is not complete within the handshake timeout (silent, or a
///   request sent by halves) is closed.
///
/// It sits right after the HTTP request decoder and leaves the pipeline once the first request is
/// complete and let through, so the WebSocket frames that follow an upgrade never pass it.
final class UpgradeAuthGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    struct Rules: Sendable {
        let path: String
        /// The device a bearer token (the `Authorization` header) belongs to, if any.
        let device: @Sendable (String?) -> String?
        let handshakeTimeout: TimeAmount
        /// Seconds an agent refused for capacity is told to wait at least; the header says a
        /// random number of seconds from this to twice this, so refused cars come back spread out.
        let retryAfterSeconds: Int
        /// Stream connections of one device at once.
        let maxPerDevice: Int
        let perDevice = DeviceConnections()
        /// Stream sessions starting at once (upgrade to `welcome`).
        let maxStarting: Int
        let starting = StartingSessions()
        let metrics: ServerMetrics
        let logger: Logger
        /// Refusals come as fast as a peer sends: their log lines are limited.
        let refusals = LogLimit()
    }

    private let rules: Rules
    private let overCapacity: Bool
    /// The connection's place among the starting sessions, taken here for a stream upgrade.
    private let start: StartSlot
    private var refused = false
    private var deadline: Scheduled<Void>?

    init(rules: Rules, overCapacity: Bool, start: StartSlot) {
        self.rules = rules
        self.overCapacity = overCapacity
        self.start = start
    }

    /// What a refused agent is told to wait: ``Rules/retryAfterSeconds`` to twice it, at random.
    var retryAfter: String { "\(rules.retryAfterSeconds + Int.random(in: 0...rules.retryAfterSeconds))" }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = NIOLoopBound(context.channel, eventLoop: context.eventLoop)
        let rules = self.rules
        deadline = context.eventLoop.scheduleTask(in: rules.handshakeTimeout) {
            rules.metrics.refused(.handshakeTimeout)
            rules.logger.notice(
                "closed a connection whose first request was not complete within \(rules.handshakeTimeout.nanoseconds / 1_000_000) ms")
            channel.value.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The rest of a refused request (its end, any body) goes nowhere: the connection is closing.
        guard !refused else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if overCapacity {
                rules.metrics.refused(.capacity)
                rules.logger.warning("refused a connection: server.maxConnections reached (HTTP 503)")
                refuse(context, head, .serviceUnavailable, ["Retry-After": retryAfter])
                return
            }
            let requestPath = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
            if requestPath == rules.path {
                guard let device = rules.device(head.headers.first(name: "Authorization")) else {
                    rules.metrics.refused(.unauthorized)
                    rules.refusals.log(rules.logger, .warning, "refused an upgrade without a valid token (HTTP 401)")
                    refuse(context, head, .unauthorized, ["WWW-Authenticate": "Bearer"])
                    return
                }
                // Counted for the connection's life, refused or not.
                let perDevice = rules.perDevice
                let over = perDevice.add(device, limit: rules.maxPerDevice)
                context.channel.closeFuture.whenComplete { _ in perDevice.remove(device) }
                if over {
                    rules.metrics.refused(.deviceCapacity)
                    rules.logger.warning(
                        "refused a connection: \(rules.maxPerDevice) of one device's are open (HTTP 429)",
                        metadata: ["device": "\(device)"])
                    refuse(context, head, .tooManyRequests, ["Retry-After": retryAfter])
                    return
                }
                // Held until the session's welcome is written or the connection closes.
                guard start.take(from: rules.starting, limit: rules.maxStarting) else {
                    rules.metrics.refused(.starting)
                    rules.refusals.log(
                        rules.logger, .warning,
                        "refused an upgrade: \(rules.maxStarting) sessions are starting already (server.maxUpgradesInProgress; HTTP 503)")
                    refuse(context, head, .serviceUnavailable, ["Retry-After": retryAfter])
                    return
                }
            }
            context.fireChannelRead(data)
        case .body:
            context.fireChannelRead(data)
        case .end:
            // The first request is complete: the deadline is met and the gate's work done.
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    private func refuse(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, _ status: HTTPResponseStatus, _ extra: HTTPHeaders) {
        refused = true
        var headers: HTTPHeaders = ["Connection": "close", "Content-Length": "0"]
        headers.add(contentsOf: extra)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        // Tell the upgrader its request stream has ended: it then closes the connection quietly
        // (a plain close would make it report a failed upgrade as an error).
        let closing = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            closing.value.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            closing.value.close(promise: nil)
        }
    }
}

/// When the peer last sent anything at all: any bytes read on the connection, WebSocket pongs and
/// pings included, so an agent that only answers pings (paused by 4402, say) is not idle.
///
/// While the server keeps a session waiting for room for its segment, it reads nothing more from
/// the peer (``ReadCredit``): the peer's silence is the server's doing, and the connection counts
/// as active then. (Not while the server waits to write to the peer: a peer that stops reading
/// must still go.)
final class ConnectionActivity: Sendable {
    private let state = Mutex((last: ContinuousClock.now, serverBusy: false))
    func touch() { state.withLock { $0.last = .now } }
    var last: ContinuousClock.Instant { state.withLock { $0.serverBusy ? .now : $0.last } }

    /// Runs `body`, during which the connection is active whatever the peer sends.
    func whileServerBusy<T>(_ body: () async throws -> T) async rethrows -> T {
        state.withLock { $0.serverBusy = true }
        defer { state.withLock { $0 = (.now, false) } }
        return try await body()
    }
}

/// Stamps ``ConnectionActivity`` on every read; first in the pipeline, there for the connection's life.
/// It also keeps the connection's ``StartSlot``, where its session finds it.
final class ReadActivity: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let activity = ConnectionActivity()
    let start: StartSlot

    init(start: StartSlot) { self.start = start }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        activity.touch()
        context.fireChannelRead(data)
    }

    /// The handler of `channel`, on its event loop.
    static func of(_ channel: any Channel) throws -> ReadActivity {
        try channel.pipeline.syncOperations.handler(type: ReadActivity.self)
    }
}

/// The stream sessions starting at once: from the upgrade request to the session's `welcome`.
final class StartingSessions: Sendable {
    private let count = Atomic<Int>(0)
    var current: Int { count.load(ordering: .relaxed) }
    /// Counts one more unless `limit` are starting; whether it did.
    func take(limit: Int) -> Bool {
        if count.add(1, ordering: .relaxed).newValue <= limit { return true }
        count.subtract(1, ordering: .relaxed)
        return false
    }
    func give() { count.subtract(1, ordering: .relaxed) }
}

/// One connection's place among the ``StartingSessions``: taken at its upgrade, given back once,
/// when its session has started or the connection closed, whichever comes first.
final class StartSlot: Sendable {
    private let held = Mutex<StartingSessions?>(nil)
    /// Takes a place in `sessions`; false if `limit` are starting.
    func take(from sessions: StartingSessions, limit: Int) -> Bool {
        guard sessions.take(limit: limit) else { return false }
        held.withLock { $0 = sessions }
        return true
    }
    func give() {
        held.withLock { held in
            defer { held = nil }; return held
        }?.give()
    }
}

/// Each device's open stream connections, counted against `server.maxConnectionsPerDevice`.
final class DeviceConnections: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    /// Counts one more of `device`'s; whether that one is over `limit`.
    func add(_ device: String, limit: Int) -> Bool {
        counts.withLock { counts in
            let count = counts[device, default: 0] + 1
            counts[device] = count
            return count > limit
        }
    }
    func remove(_ device: String) {
        counts.withLock { counts in
            let count = counts[device, default: 1] - 1
            counts[device] = count > 0 ? count : nil
        }
    }
}

/// The server's open connections, counted against `server.maxConnections`.
final class OpenConnections: Sendable {
    private let count = Atomic<Int>(0)
    /// Counts one more; whether that one is over `limit`.
    func add(limit: Int) -> Bool { count.add(1, ordering: .relaxed).newValue > limit }
    func remove() { count.subtract(1, ordering: .relaxed) }
}

/// A server child channel with a ``ReadActivity`` first and an ``UpgradeAuthGate`` after the HTTP
/// request decoder; counts open connections against `maxConnections`.
struct AuthGatedChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base
    let rules: UpgradeAuthGate.Rules
    let maxConnections: Int
    let open: OpenConnections

    /// Bytes read from a socket at a time. NIO keeps a connection's receive buffers for the
    /// connection's life, `maxMessagesPerRead` of them, each as large as its largest read: with
    /// its defaults (4, up to 64 KiB) they held about 156 KiB per session (heaptrack, 500 agents
    /// sending segments), while the agent was silent between segments too. One buffer of 16 KiB
    /// reads a 64 KiB chunk in four calls instead of one.
    static var receiveBufferBytes: Int { 16 * 1024 }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let overCapacity = open.add(limit: maxConnections)
        let open = self.open
        let start = StartSlot()
        channel.closeFuture.whenComplete { _ in
            open.remove()
            start.give()
        }
        return base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            if let options = channel.syncOptions {
                try options.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
                try options.setOption(
                    ChannelOptions.recvAllocator,
                    value: AdaptiveRecvByteBufferAllocator(
                        minimum: 64, initial: 2048, maximum: Self.receiveBufferBytes))
            }
            let operations = channel.pipeline.syncOperations
            try operations.addHandler(ReadActivity(start: start), position: .first)
            let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(UpgradeAuthGate(rules: rules, overCapacity: overCapacity, start: start), position: .after(decoder))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
