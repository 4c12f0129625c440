import Foundation
import Glibc
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// Sends one mail to the relay (`mail.relay`): a TCP connection, TLS by STARTTLS with the
/// relay's certificate verified against its host name (the system's roots and `mail.caFile`),
/// and the conversation ``StateMachine`` decides. This type only carries out its actions: it
/// writes commands, reads replies (``SMTPReplyParser``) and puts TLS on the connection.
///
/// - Important: the connection has `timeout` to open, and every reply `timeout` to come; then
///   it is closed. Credentials are never logged.
struct SMTPClient: Sendable {
    struct Relay: Sendable, Equatable {
        var host: String
        var port: Int
    }

    let relay: Relay
    /// Verification on; `mail.caFile`'s certificates added to the roots.
    let tls: TLSConfiguration
    let timeout: Duration
    let logger: Logger

    /// Sends `message` (``MailMessage/rendered()``) as `settings` say; the outcome, never a throw.
    func send(_ message: [UInt8], settings: StateMachine.Settings) async -> StateMachine.Outcome {
        let context: NIOSSLContext
        do { context = try NIOSSLContext(configuration: tls) } catch { return .failed(.connection("TLS: \(error)")) }
        // Every byte the connection has handed the reader, in clear or from TLS: what was read
        // must be all of it when TLS begins (see `.startTLS` below).
        let delivered = DeliveredBytes()
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(TimeAmount(timeout))
                .connect(host: relay.host, port: relay.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(delivered)
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch ChannelError.connectTimeout {
            return .failed(.timedOut("connecting to \(relay.host):\(relay.port)"))
        } catch {
            return .failed(.connection("\(relay.host):\(relay.port): \(error)"))
        }
        let deadline = ReplyDeadline(channel: channel.channel, timeout: timeout)
        var machine = StateMachine(settings: settings)
        do {
            return try await channel.executeThenClose { inbound, outbound in
                var parser = SMTPReplyParser()
                var consumed = 0
                deadline.arm()
                for try await buffer in inbound {
                    consumed += buffer.readableBytes
                    let replies = try parser.feed(buffer.readableBytesView)
                    for (index, reply) in replies.enumerated() {
                        deadline.disarm()
                        logger.trace("smtp: < \(reply.code)")
                        var actions = machine.received(reply)
                        while !actions.isEmpty {
                            switch actions.removeFirst() {
                            case .send(let command):
                                // AUTH's argument is the password: never in a log.
                                logger.trace("smtp: > \(command.hasPrefix("AUTH ") ? "AUTH PLAIN ***" : command)")
                                try await outbound.write(ByteBuffer(string: command + "\r\n"))
                            case .startTLS:
                                // Nothing may follow the relay's 220 in clear: a reply that came with
                                // it, or in a read before TLS was on, would be taken for one of the
                                // encrypted session's (a man in the middle's injection, as in
                                // CVE-2021-38371).
                                guard index == replies.count - 1, parser.isEmpty else { throw SMTPFailure.malformed(Self.injected) }
                                let host = relay.host
                                let handshake = channel.channel.eventLoop.makePromise(of: Void.self)
                                try await channel.channel.eventLoop.submit {
                                    // A name is checked against the certificate's names; an address
                                    // (no SNI for it) against its addresses.
                                    let handler = try NIOSSLClientHandler(
                                        context: context, serverHostname: Self.isAddress(host) ? nil : host)
                                    try channel.channel.pipeline.syncOperations.addHandler(handler, position: .first)
                                    try channel.channel.pipeline.syncOperations.addHandler(
                                        HandshakeDone(promise: handshake), position: .after(handler))
                                }.get()
                                deadline.arm()
                                try await handshake.futureResult.get()
                                deadline.disarm()
                                guard delivered.count == consumed else { throw SMTPFailure.malformed(Self.injected) }
                                actions += machine.tlsStarted()
                            case .sendMessage:
                                try await outbound.write(ByteBuffer(bytes: MailMessage.data(message)))
                            case .finish(let outcome):
                                deadline.disarm()
                                return outcome
                            }
                        }
                        deadline.arm()
                    }
                }
                deadline.disarm()
                return Self.outcome(machine.closed(deadline.fired ? .timedOut("a reply") : .closed))
            }
        } catch let failure as SMTPFailure {
            deadline.disarm()
            return Self.outcome(machine.closed(failure))
        } catch {
            deadline.disarm()
            return Self.outcome(machine.closed(deadline.fired ? .timedOut("a reply") : .connection("\(error)")))
        }
    }

    private static func outcome(_ actions: [StateMachine.Action]) -> StateMachine.Outcome {
        for case .finish(let outcome) in actions { return outcome }
        return .failed(.closed)
    }

    static let injected = "the relay sent more in clear after its answer to STARTTLS (refused: it could be a man in the middle's)"

    /// An IPv4 or IPv6 address rather than a name.
    static func isAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}

/// Counts the bytes the connection hands the reader (at the end of the pipeline, so after TLS
/// once it is on, and everything before it).
private final class DeliveredBytes: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let total = Mutex(0)

    var count: Int { total.withLock { $0 } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data).readableBytes
        total.withLock { $0 += bytes }
        context.fireChannelRead(data)
    }
}

/// Fulfils its promise when the TLS handshake is done; fails it if the connection ends or fails
/// first.
private final class HandshakeDone: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    private let promise: EventLoopPromise<Void>

    init(promise: EventLoopPromise<Void>) { self.promise = promise }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event { promise.succeed() }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(SMTPFailure.closed)
        context.fireChannelInactive()
    }
}

/// The time a reply has to come: armed while one is awaited, it closes the connection when it
/// runs out (the read loop then ends, and says why).
private final class ReplyDeadline: Sendable {
    private let channel: any Channel
    private let timeout: Duration
    private let state = Mutex<(scheduled: Scheduled<Void>?, fired: Bool)>((nil, false))

    init(channel: any Channel, timeout: Duration) {
        self.channel = channel
        self.timeout = timeout
    }

    var fired: Bool { state.withLock { $0.fired } }

    func arm() {
        let channel = self.channel
        let scheduled = channel.eventLoop.scheduleTask(in: TimeAmount(timeout)) { [weak self] in
            self?.state.withLock { $0.fired = true }
            channel.close(promise: nil)
        }
        state.withLock {
            $0.scheduled?.cancel()
            $0.scheduled = scheduled
        }
    }

    func disarm() {
        state.withLock {
            $0.scheduled?.cancel()
            $0.scheduled = nil
        }
    }
}
