import NIOCore
import NIOWebSocket
import Synchronization

/// Keeps a connection from reading ahead of its session: once a whole message has been read that
/// the session has not finished with, the socket is not read again until it has.
///
/// NIO reads ahead of an async consumer by up to ten frames (its watermarks), 640 KiB of chunks
/// per connection; a session that waits for room (``InFlightBudget``) would leave that much
/// buffered on each of thousands of connections. With this, the session says when it is done with
/// a message (after its room, its charge and its answer), so one that waits holds nothing but the
/// header it waits with, and what its car sends meanwhile waits in the network.
///
/// It sits after the WebSocket frame decoder (and ``FrameUnmasker``) and counts the messages that
/// data frames end (`fin`); a message in fragments is read on to its end, and control frames,
/// which the session never sees, do not count.
final class ReadCredit: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The session's side: what it finished with, from any thread.
    final class Taker: Sendable {
        /// Whole messages read that the session has not finished with; below 0 when messages were
        /// read before the handler was in place.
        fileprivate let waiting = Atomic<Int>(0)
        /// A read was held back and waits for the session.
        fileprivate let held = Atomic<Bool>(false)
        fileprivate let resume: @Sendable () -> Void

        fileprivate init(resume: @escaping @Sendable () -> Void) { self.resume = resume }

        /// The session is done with a message: the next may be read.
        func finished() {
            let left = waiting.subtract(1, ordering: .relaxed).newValue
            if left < 1, held.exchange(false, ordering: .acquiring) { resume() }
        }
    }

    private(set) var taker: Taker!
    private var context: ChannelHandlerContext?
    private var readPending = false

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loop = context.eventLoop
        let me = NIOLoopBound(self, eventLoop: loop)
        taker = Taker { loop.execute { me.value.resumeReading() } }
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
        case .binary, .text, .continuation: if frame.fin { taker.waiting.add(1, ordering: .relaxed) }
        default: break
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        guard taker.waiting.load(ordering: .relaxed) >= 1 else {
            context.read()
            return
        }
        readPending = true
        taker.held.store(true, ordering: .releasing)
        // The session may have finished between the look and the flag.
        if taker.waiting.load(ordering: .relaxed) < 1, taker.held.exchange(false, ordering: .acquiring) {
            resumeReading()
        }
    }

    private func resumeReading() {
        guard readPending, let context else { return }
        readPending = false
        context.read()
    }

    /// Puts a credit after `channel`'s ``FrameUnmasker`` and returns the session's side of it.
    static func install(on channel: any Channel) throws -> Taker {
        let operations = channel.pipeline.syncOperations
        let unmasker = try operations.handler(type: FrameUnmasker.self)
        let credit = ReadCredit()
        try operations.addHandler(credit, position: .after(unmasker))
        return credit.taker
    }
}
