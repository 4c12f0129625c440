import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// Answers an upgrade request on the stream path that carries no valid token with HTTP 401,
/// before the WebSocket upgrader sees it (the upgrader answers every refusal with 400).
///
/// It sits right after the HTTP request decoder and leaves the pipeline after the first request
/// it lets through, so the WebSocket frames that follow an upgrade never pass it.
final class UpgradeAuthGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let path: String
    private let isAuthorized: @Sendable (String?) -> Bool
    private let logger: Logger
    private var refused = false

    init(path: String, isAuthorized: @escaping @Sendable (String?) -> Bool, logger: Logger) {
        self.path = path
        self.isAuthorized = isAuthorized
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The rest of a refused request (its end, any body) goes nowhere: the connection is closing.
        guard !refused else { return }
        guard case .head(let head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        let requestPath = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        if requestPath == path, !isAuthorized(head.headers.first(name: "Authorization")) {
            refused = true
            logger.warning("refused an upgrade without a valid token (HTTP 401)")
            let headers: HTTPHeaders = ["Connection": "close", "Content-Length": "0", "WWW-Authenticate": "Bearer"]
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .unauthorized, headers: headers))), promise: nil)
            // Tell the upgrader its request stream has ended: it then closes the connection quietly
            // (a plain close would make it report a failed upgrade as an error).
            let closing = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
                closing.value.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
                closing.value.close(promise: nil)
            }
            return
        }
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}

/// A server child channel with an ``UpgradeAuthGate`` added after the HTTP request decoder.
struct AuthGatedChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value

    let base: Base
    let path: String
    let isAuthorized: @Sendable (String?) -> Bool
    let logger: Logger

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let operations = channel.pipeline.syncOperations
            let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(
                UpgradeAuthGate(path: path, isAuthorized: isAuthorized, logger: self.logger), position: .after(decoder))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
