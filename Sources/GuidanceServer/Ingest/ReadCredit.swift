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
    ///
    /// The count of messages and the flag of a held read change under one lock. The event loop
    /// holding a read and the session finishing its message meet here from two threads. Kept as
    /// two separate atomics, each side could miss the other's write (on x86 a load may pass an
    /// earlier store), and then neither resumed the read: the session read nothing more until the
    /// idle timeout closed it (4001). ``ReadCreditTests`` finds that in a few hundred of 100 000
    /// rounds; with the lock, in none.
    final class Taker: Sendable {
        /// `waiting`: whole messages read that the session has not finished with; below 0 when
        /// messages were read before the handler was in place. `held`: a read waits for the session.
        private let state = Mutex<(waiting: Int, held: Bool)>((0, false))
        fileprivate let resume: @Sendable () -> Void

        init(resume: @escaping @Sendable () -> Void) { self.resume = resume }

        /// The session is done with a message: the next may be read.
        func finished() {
            if finishedOne() { resume() }
        }

        /// One message finished; true if a held read must be resumed now (by the caller).
        func finishedOne() -> Bool {
            state.withLock { state in
                state.waiting -= 1
                guard state.waiting < 1, state.held else { return false }
                state.held = false
                return true
            }
        }

        /// A whole message was read.
        func messageRead() { state.withLock { $0.waiting += 1 } }

        /// The event loop would read: true if it may now; otherwise the read is held, and the
        /// ``finishedOne()`` that leaves no message waiting says to resume it.
        func mayRead() -> Bool {
            state.withLock { state in
                guard state.waiting >= 1 else { return true }
                state.held = true
                return false
            }
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
        case .binary, .text, .continuation: if frame.fin { taker.messageRead() }
        default: break
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        if taker.mayRead() {
            context.read()
        } else {
            // Resumed through the loop, so after this returns: the flag is set by then.
            readPending = true
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
