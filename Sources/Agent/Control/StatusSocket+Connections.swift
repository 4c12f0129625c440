import Foundation
import GuidanceProtocol
import HAL
import Logging
import NIOCore
import Synchronization

/// Who is let in: the cap on connections, the read deadline and size limit, and the count of
/// clients turned away.
extension StatusSocket {
    /// The reply to a client over the cap; ``ask(_:path:patience:)`` tries again on it.
    static let busyReply = #"{"busy":true,"error":"the agent is answering as many requests as it takes at once; try again"}"#

    /// Admits the connection under the cap, or tells it it is busy and closes it.
    func setUp(_ channel: any Channel, requests: AsyncStream<Request>.Continuation) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            guard gate.enter(channel) else {
                report(.overCap)
                try channel.pipeline.syncOperations.addHandler(BusyHandler())
                return
            }
            channel.closeFuture.whenComplete { [gate] _ in gate.leave(channel) }
            let limits = self.limits
            try channel.pipeline.syncOperations.addHandler(
                RequestHandler(limits: limits, report: report) { line in
                    if case .terminated = requests.yield(Request(line: line, channel: channel)) { channel.close(promise: nil) }
                })
        }
    }

    /// Says busy as soon as the connection is up, then closes it.
    private final class BusyHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        func channelActive(context: ChannelHandlerContext) {
            StatusSocket.send(StatusSocket.busyReply, on: context.channel, deadline: .seconds(1))
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    }

    /// Reads one request line under a deadline and a size limit; anything after it is ignored.
    private final class RequestHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        private let limits: Limits
        private let report: @Sendable (Refusal) -> Void
        private let received: (String) -> Void
        private var bytes: [UInt8] = []
        private var done = false
        private var deadline: Scheduled<Void>?

        init(limits: Limits, report: @escaping @Sendable (Refusal) -> Void, received: @escaping (String) -> Void) {
            self.limits = limits
            self.report = report
            self.received = received
        }

        func handlerAdded(context: ChannelHandlerContext) {
            let channel = context.channel
            deadline = context.eventLoop.scheduleTask(in: TimeAmount(limits.readTimeout)) { [report] in
                report(.timedOut)
                channel.close(promise: nil)
            }
        }

        func handlerRemoved(context: ChannelHandlerContext) {
            deadline?.cancel()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !done else { return }
            bytes.append(contentsOf: unwrapInboundIn(data).readableBytesView)
            let end = bytes.firstIndex(of: UInt8(ascii: "\n"))
            guard end != nil || bytes.count > limits.requestBytes else { return }
            done = true
            deadline?.cancel()
            if (end ?? bytes.count) > limits.requestBytes {
                report(.tooLong)
                let error = ControlRequests.json([
                    "error": "request longer than \(limits.requestBytes) bytes; send one line: `status`, `say-status` or `protect …`"
                ])
                StatusSocket.send(error, on: context.channel, deadline: limits.readTimeout)
                return
            }
            received(String(decoding: bytes[..<end!], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }

    func report(_ refusal: Refusal) {
        guard let counts = gate.count(refusal) else { return }
        logger.warning(
            "status: refused \(counts.overCap) connection(s) over the cap of \(limits.connections), closed \(counts.timedOut) that sent no request within \(limits.readTimeout) and \(counts.tooLong) with a request over \(limits.requestBytes) bytes (totals; logged at most once a minute)"
        )
    }

    /// Clients turned away or cut off, since the socket started.
    struct Refusals: Sendable, Equatable {
        var overCap = 0
        var timedOut = 0
        var tooLong = 0
    }

    enum Refusal { case overCap, timedOut, tooLong }

    var refusals: Refusals { gate.refusals }

    /// The open connections and the refusals, shared by the event loops and the service.
    final class Gate: Sendable {
        private struct State {
            var open: [ObjectIdentifier: any Channel] = [:]
            var refusals = Refusals()
            var log = RateLimit(interval: .seconds(60))
        }

        private let limit: Int
        private let state = Mutex(State())

        init(limit: Int) { self.limit = limit }

        func enter(_ channel: any Channel) -> Bool {
            state.withLock { state in
                guard state.open.count < limit else { return false }
                state.open[ObjectIdentifier(channel)] = channel
                return true
            }
        }

        func leave(_ channel: any Channel) { _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) } }

        /// On shutdown: requests still being read or answered are cut off.
        func closeAll() {
            for channel in state.withLock({ $0.open.values }) { channel.close(promise: nil) }
        }

        /// Counts a refusal; the totals when the log may hear of them now.
        func count(_ refusal: Refusal) -> Refusals? {
            state.withLock { state in
                switch refusal {
                case .overCap: state.refusals.overCap += 1
                case .timedOut: state.refusals.timedOut += 1
                case .tooLong: state.refusals.tooLong += 1
                }
                return state.log.allows(now: MonotonicClock.now()) ? state.refusals : nil
            }
        }

        var refusals: Refusals { state.withLock { $0.refusals } }
    }
}
