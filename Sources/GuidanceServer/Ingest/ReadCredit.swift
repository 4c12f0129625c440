import NIOCore
import NIOWebSocket
import Synchronization

/// Keeps a connection from reading far ahead of its session: once a message's worth of data
/// frames has been read and not yet taken by the session, the socket is not read again until the
/// session takes some.
///
/// NIO reads ahead of an async consumer by up to ten frames (its watermarks), 640 KiB of chunks
/// per connection; a session that waits for room (``InFlightBudget``) would leave that much
/// buffered on each of thousands of connections. With this, one that waits holds at most one
/// message more, and the rest of what its car sends waits in the network.
///
/// It sits after the WebSocket frame decoder (and ``FrameUnmasker``) and counts data frames'
/// payloads; control frames, which the session never sees, are not counted.
final class ReadCredit: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The session's side: what it took, from any thread.
    final class Taker: Sendable {
        /// Payload bytes read and not taken yet; below 0 when frames were read before the handler
        /// was in place.
        fileprivate let untaken = Atomic<Int>(0)
        /// A read was held back and waits for the session to take something.
        fileprivate let held = Atomic<Bool>(false)
        fileprivate let limit: Int
        fileprivate let resume: @Sendable () -> Void

        fileprivate init(limit: Int, resume: @escaping @Sendable () -> Void) {
            self.limit = limit
            self.resume = resume
        }

        /// The session took a message of `bytes`.
        func took(_ bytes: Int) {
            let left = untaken.subtract(bytes, ordering: .relaxed).newValue
            if left < limit, held.exchange(false, ordering: .acquiring) { resume() }
        }
    }

    /// Bytes read ahead at most (a message must fit, or a session could wait for one forever).
    let limit: Int
    private(set) var taker: Taker!
    private var context: ChannelHandlerContext?
    private var readPending = false

    init(limit: Int) { self.limit = limit }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loop = context.eventLoop
        let me = NIOLoopBound(self, eventLoop: loop)
        taker = Taker(limit: limit) { loop.execute { me.value.resumeReading() } }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        // Nothing counts any more: a read held back goes on.
        if readPending {
            readPending = false
            context.read()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .binary, .text, .continuation: taker.untaken.add(frame.length, ordering: .relaxed)
        default: break
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        guard taker.untaken.load(ordering: .relaxed) >= limit else {
            context.read()
            return
        }
        readPending = true
        taker.held.store(true, ordering: .releasing)
        // The session may have taken its message between the look and the flag.
        if taker.untaken.load(ordering: .relaxed) < limit, taker.held.exchange(false, ordering: .acquiring) {
            resumeReading()
        }
    }

    private func resumeReading() {
        guard readPending, let context else { return }
        readPending = false
        context.read()
    }

    /// Puts a credit after `channel`'s ``FrameUnmasker`` and returns the session's side of it.
    static func install(on channel: any Channel, limit: Int) throws -> Taker {
        let operations = channel.pipeline.syncOperations
        let unmasker = try operations.handler(type: FrameUnmasker.self)
        let credit = ReadCredit(limit: limit)
        try operations.addHandler(credit, position: .after(unmasker))
        return credit.taker
    }
}
