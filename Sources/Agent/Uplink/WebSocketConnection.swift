import NIOCore
import NIOWebSocket
import Synchronization

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

    init(channel: any Channel, inbound: AsyncStream<WebSocketInbound>, reader: Task<Void, Never>) {
        self.channel = channel
        self.inbound = inbound
        self.reader = reader
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
        if closing.withLock({ closing in
            defer { closing = true }; return !closing
        }) {
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
}
