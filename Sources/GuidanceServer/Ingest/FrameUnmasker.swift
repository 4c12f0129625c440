import NIOCore
import NIOWebSocket

/// Unmasks each client frame as it leaves the WebSocket frame decoder, eight bytes at a time, and
/// passes it on unmasked (no masking key).
///
/// Every byte an agent sends is masked (RFC 6455, 5.3). NIO unmasks one byte at a time when the
/// frame is read (`WebSocketFrame.unmaskedData`): for a 5-s segment of 241 kB that was a fifth of
/// the server's CPU. What the frame means is unchanged: its payload is the unmasked bytes either
/// way, and nothing downstream requires a masking key. A frame with extension data (none is
/// negotiated) is passed on as it came.
final class FrameUnmasker: ChannelInboundHandler, Sendable {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var frame = unwrapInboundIn(data)
        if let key = frame.maskKey, frame.extensionData == nil {
            Self.unmask(&frame.data, key: key)
            frame.maskKey = nil
            context.fireChannelRead(wrapInboundOut(frame))
        } else {
            context.fireChannelRead(data)
        }
    }

    /// XORs `buffer`'s readable bytes with `key` repeated, as RFC 6455 5.3 describes.
    static func unmask(_ buffer: inout ByteBuffer, key: WebSocketMaskingKey) {
        // The four key bytes twice over, in memory order: byte i of the payload meets key[i % 4].
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { raw in
            for index in 0..<8 { raw[index] = key[key.startIndex + index % 4] }
        }
        buffer.withUnsafeMutableReadableBytes { payload in
            let count = payload.count
            var offset = 0
            while offset + 8 <= count {
                let value = payload.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                payload.storeBytes(of: value ^ word, toByteOffset: offset, as: UInt64.self)
                offset += 8
            }
            withUnsafeBytes(of: word) { mask in
                for index in 0..<(count - offset) { payload[offset + index] ^= mask[index] }
            }
        }
    }

    /// Puts an unmasker right after `channel`'s WebSocket frame decoder. Frames read before it is
    /// in place are unmasked by NIO as before. On `channel`'s event loop.
    static func install(on channel: any Channel) throws {
        let operations = channel.pipeline.syncOperations
        let decoder = try operations.handler(type: ByteToMessageHandler<WebSocketFrameDecoder>.self)
        try operations.addHandler(FrameUnmasker(), position: .after(decoder))
    }
}
