import NIOCore
import NIOWebSocket

extension WebSocketConnection {
    /// The control side of RFC 6455, on the event loop: masks every frame sent, answers pings,
    /// answers a close and closes the socket, and fails every write after our close frame.
    ///
    /// On an oversized message (1009), a protocol error (1002) or an overflowing reader (1008) it fails
    /// the connection: sends the close, drops what still arrives, and closes the socket once the peer
    /// does or after a second (closing with unread data would reset the connection and lose the close
    /// frame). The reader learns why as the error that ends its stream.
    final class FrameControl: ChannelDuplexHandler {
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
                send(
                    WebSocketFrame(fin: true, opcode: .connectionClose, data: payload.readSlice(length: 2) ?? ByteBuffer()),
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
}
