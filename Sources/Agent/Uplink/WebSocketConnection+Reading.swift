import Logging
import NIOCore
import NIOWebSocket

extension WebSocketConnection {
    static func start(
        _ webSocket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, logger: Logger,
        maxMessageBytes: Int
    ) -> WebSocketConnection {
        let (inbound, sink) = AsyncStream.makeStream(
            of: WebSocketInbound.self,
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
    private static func read(
        _ frames: NIOAsyncChannelInboundStream<WebSocketFrame>,
        into sink: AsyncStream<WebSocketInbound>.Continuation,
        channel: any Channel, logger: Logger, maxMessageBytes: Int
    ) async -> WebSocketInbound {
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
}
