import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A TCP forwarder on 127.0.0.1 between a client and a real server, made of bare NIO parts, so a
/// test can make one connection fail the way connections fail on the road — a peer that goes
/// quiet, a path that stops draining, a server that dies — at the moment the test chooses.
public final class FlakyLink: Sendable {
    public enum Start: Sendable {
        /// Connect to the target and pass bytes both ways.
        case forward
        /// Accept, read and drop everything, never write a byte and never reach the target: an
        /// upgrade that never comes.
        case neverAnswer
    }

    private let channel: any Channel
    private let links = NIOLockedValueBox<[Int: Link]>([:])
    private let tripWire: TripWire?
    public var port: Int { channel.localAddress?.port ?? 0 }
    /// Connections accepted so far.
    public var connections: Int { links.withLockedValue { $0.count } }

    /// Listens on 127.0.0.1 and an ephemeral port; connection n (from 0) starts as `start(n)`.
    /// `receiveBuffer` sets SO_RCVBUF on accepted sockets, so `stopReading` pushes back quickly.
    /// `cutWhenServerSends`: the connection whose target (the server) sends these bytes for the
    /// `count`th time in all is cut at that moment (as ``cut(_:)`` does), those bytes undelivered.
    /// A server's frames are not masked, so a test can cut the link at a point of the protocol
    /// (the answer to an upload's first part) instead of at a time.
    public init(
        targetPort: Int, targetHost: String = "127.0.0.1", receiveBuffer: Int? = nil,
        cutWhenServerSends: (bytes: String, count: Int)? = nil,
        start: @escaping @Sendable (Int) -> Start = { _ in .forward }
    ) async throws {
        let links = self.links
        let tripWire = cutWhenServerSends.map { TripWire(needle: Array($0.bytes.utf8), count: $0.count) }
        self.tripWire = tripWire
        var bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        if let receiveBuffer {
            // Set on the listener so accepted sockets inherit it before the window is advertised.
            bootstrap = bootstrap.serverChannelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer))
        }
        channel = try await bootstrap.serverChannelInitializer { server in
            // Accepted channels are set up on their own event loops, in no fixed order; they are
            // numbered here, on the listener's loop, in the order they were accepted.
            server.eventLoop.makeCompletedFuture {
                try server.pipeline.syncOperations.addHandler(Numbering(links: links, tripWire: tripWire))
            }
        }
        .childChannelInitializer { client in
            guard let (index, link) = links.withLockedValue({ $0.first { $0.value.client === client } }) else {
                return client.eventLoop.makeFailedFuture(ChannelError.inappropriateOperationForState)
            }
            let start = start(index)
            if start == .neverAnswer {
                link.setMode(.silent, ifStill: .forward)
            }
            return client.eventLoop.makeCompletedFuture {
                let glue = Glue(link: link, awaitingPartner: start == .forward)
                try client.pipeline.syncOperations.addHandler(glue)
                guard start == .forward else { return }
                // Both glue handlers exist before the target answers, so no byte it sends first
                // finds the pipeline without one.
                let targetGlue = Glue(link: link, awaitingPartner: false)
                glue.partner = targetGlue
                targetGlue.partner = glue
                let bound = NIOLoopBound((glue, targetGlue), eventLoop: client.eventLoop)
                // On the client's event loop, so the two glue handlers can call each other directly.
                ClientBootstrap(group: client.eventLoop)
                    .channelInitializer { target in
                        target.eventLoop.makeCompletedFuture {
                            try target.pipeline.syncOperations.addHandler(bound.value.1)
                        }
                    }
                    .connect(host: targetHost, port: targetPort)
                    .whenComplete { result in
                        switch result {
                        case .success(let target):
                            link.target.withLockedValue { $0 = target }
                            // The client may not be active yet, but it must not be gone.
                            guard !bound.value.0.gone, link.mode != .cut else {
                                target.close(promise: nil)
                                return
                            }
                            bound.value.0.awaitingPartner = false
                            bound.value.0.resume()
                        case .failure:
                            client.close(promise: nil)
                        }
                    }
            }
        }
        .bind(host: "127.0.0.1", port: 0).get()
    }

    /// Connection `index` goes silent: from now on bytes in both directions are read and dropped
    /// and the sockets stay open, even if one end closes — a peer that has stopped answering, or a
    /// path whose packets vanish. The client's writes keep succeeding; it hears nothing.
    public func goSilent(_ index: Int) {
        guard let link = link(index) else { return }
        link.setMode(.silent)
        // Reads held back for the other side's writability, for the target to connect, or by
        // stopReading, resume now that their bytes go nowhere.
        link.onLoop { glues in
            link.client.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in }
            glues.forEach { $0.resume() }
        }
    }

    /// Connection `index` stops reading from the client and forwards nothing either way (what the
    /// target sends is read and dropped, and no close is relayed): the client's writes pile up in
    /// the socket buffers until they block, as on a path that has stopped draining.
    public func stopReading(_ index: Int) {
        guard let link = link(index) else { return }
        link.setMode(.stalled)
        link.client.eventLoop.execute {
            link.client.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
    }

    /// Closes connection `index` on both sides at once, with a reset, as a server killed
    /// mid-segment would.
    public func cut(_ index: Int) {
        link(index)?.cut()
    }

    /// The trip wire (`cutWhenServerSends`) has cut a connection.
    public var tripped: Bool { tripWire?.tripped ?? false }

    /// Stops listening and closes every connection.
    public func stop() async {
        try? await channel.close()
        let all = links.withLockedValue { $0.values }
        for link in all {
            link.setMode(.cut)
            try? await link.client.close()
            try? await link.target.withLockedValue({ $0 })?.close()
        }
    }

    private func link(_ index: Int) -> Link? {
        links.withLockedValue { $0[index] }
    }

    /// SO_LINGER 0 turns the close into a RST.
    fileprivate static func reset(_ channel: any Channel) {
        let noLinger = linger(l_onoff: 1, l_linger: 0)
        let set = (channel as? any SocketOptionProvider)?.setSoLinger(noLinger) ?? channel.eventLoop.makeSucceededVoidFuture()
        set.whenComplete { _ in channel.close(promise: nil) }
    }
}

/// Gives each accepted channel its number and its entry before it is set up.
private final class Numbering: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    private let links: NIOLockedValueBox<[Int: Link]>
    private let tripWire: TripWire?

    init(links: NIOLockedValueBox<[Int: Link]>, tripWire: TripWire?) {
        self.links = links
        self.tripWire = tripWire
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let link = Link(client: unwrapInboundIn(data), tripWire: tripWire)
        links.withLockedValue { $0[$0.count] = link }
        context.fireChannelRead(data)
    }
}

/// One accepted connection: its two channels and what it does with the bytes. The mode sits
/// behind a lock so a change made from the test's thread applies to the very next read.
private final class Link: Sendable {
    enum Mode: Sendable {
        case forward
        /// Read and drop both ways.
        case silent
        /// Stop reading the client; read and drop what the target sends.
        case stalled
        /// Being closed on purpose: nothing more passes and no close is relayed.
        case cut
    }

    let client: any Channel
    let target = NIOLockedValueBox<(any Channel)?>(nil)
    let tripWire: TripWire?
    private let modeBox: NIOLockedValueBox<Mode>
    var mode: Mode { modeBox.withLockedValue { $0 } }

    init(client: any Channel, tripWire: TripWire?) {
        self.client = client
        self.tripWire = tripWire
        self.modeBox = NIOLockedValueBox(.forward)
    }

    /// Closes both sides at once, with a reset.
    func cut() {
        setMode(.cut)
        FlakyLink.reset(client)
        if let target = target.withLockedValue({ $0 }) { FlakyLink.reset(target) }
    }

    func setMode(_ mode: Mode) {
        modeBox.withLockedValue { $0 = mode }
    }

    /// Changes the mode unless the test changed it first.
    func setMode(_ mode: Mode, ifStill expected: Mode) {
        modeBox.withLockedValue { if $0 == expected { $0 = mode } }
    }

    /// Runs `body` on the connection's event loop with the glue handlers of both channels.
    func onLoop(_ body: @escaping @Sendable ([Glue]) -> Void) {
        let client = self.client, target = self.target.withLockedValue { $0 }
        client.eventLoop.execute {
            let glues = [client, target].compactMap { channel in
                try? channel?.pipeline.syncOperations.handler(type: Glue.self)
            }
            body(glues)
        }
    }
}

/// One side of a connection, glued to the handler on the other side (both on one event loop).
/// Forwards what it reads unless the link says otherwise, and holds back reads while the other
/// side cannot take more, so a slow reader slows the writer on the far end instead of filling
/// memory here.
private final class Glue: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let link: Link
    var partner: Glue?
    /// The client side of a forwarded connection waits for the target before it reads.
    var awaitingPartner: Bool
    private var context: ChannelHandlerContext?
    private var pendingRead = false
    /// Closed, or torn down before it ever became active.
    private(set) var gone = false

    init(link: Link, awaitingPartner: Bool) {
        self.link = link
        self.awaitingPartner = awaitingPartner
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        gone = true
        self.context = nil
        partner = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard link.mode == .forward else { return }
        let bytes = unwrapInboundIn(data)
        if context.channel !== link.client, let wire = link.tripWire, wire.trips(on: bytes.readableBytesView) {
            link.cut()
            return
        }
        partner?.partnerWrite(bytes)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.partnerFlush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        gone = true
        // A silent or stalled path relays no FIN either; those ends are closed by cut or stop.
        if link.mode == .forward {
            partner?.partnerClose()
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            partner?.resume()
        }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        switch link.mode {
        case .stalled where context.channel === link.client, .cut:
            return
        case .forward:
            if awaitingPartner || !(partner?.writable ?? true) {
                pendingRead = true
                return
            }
        default:
            break
        }
        context.read()
    }

    /// Issues a read held back earlier, if the mode now allows it.
    func resume() {
        guard pendingRead, let context else { return }
        pendingRead = false
        read(context: context)
    }

    private var writable: Bool { context?.channel.isWritable ?? false }

    private func partnerWrite(_ data: ByteBuffer) {
        context?.write(wrapOutboundOut(data), promise: nil)
    }

    private func partnerFlush() {
        context?.flush()
    }

    /// Delivers what is already queued, then closes: a server's last words reach the client.
    private func partnerClose() {
        guard let context else { return }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(capacity: 0))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// Counts the times the servers sent `needle` (within one read); trips once, at the `count`th.
private final class TripWire: Sendable {
    let needle: [UInt8]
    private let count: Int
    private let state = NIOLockedValueBox<(seen: Int, tripped: Bool)>((0, false))

    init(needle: [UInt8], count: Int) {
        self.needle = needle
        self.count = count
    }

    var tripped: Bool { state.withLockedValue { $0.tripped } }

    func trips(on bytes: ByteBufferView) -> Bool {
        let haystack = Array(bytes)
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        var found = 0
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) { found += 1 }
        guard found > 0 else { return false }
        return state.withLockedValue { state in
            guard !state.tripped else { return false }
            state.seen += found
            if state.seen >= count { state.tripped = true }
            return state.tripped
        }
    }
}
