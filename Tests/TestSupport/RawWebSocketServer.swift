import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// A WebSocket server made of bare NIO parts, for testing a client against a server that
/// misbehaves: it accepts any upgrade, plays a script of frames to each connection, never
/// answers a ping, and can stop reading altogether.
public final class RawWebSocketServer: Sendable {
    public enum Step: Sendable {
        case text(String)
        case binary([UInt8])
        case pause(milliseconds: Int64)
        /// Stop reading from the socket; what the client sends piles up in its buffers.
        case stopReading
        /// Wait for the client's next ping: proof that its upgrade finished and its session runs.
        case awaitPing
    }

    private let channel: any Channel
    private let accepted = NIOLockedValueBox(0)
    private let framesReceived = NIOLockedValueBox(0)
    private let closes = NIOLockedValueBox<[Int]>([])
    public var port: Int { channel.localAddress?.port ?? 0 }
    /// Connections upgraded so far.
    public var connections: Int { accepted.withLockedValue { $0 } }
    /// Data frames read from clients so far (pings excluded).
    public var dataFrames: Int { framesReceived.withLockedValue { $0 } }
    /// The status codes of the close frames clients sent, in order (1005 for a close without one).
    public var closeCodes: [Int] { closes.withLockedValue { $0 } }

    /// Starts on 127.0.0.1 and an ephemeral port; `script(n)` is what connection n (from 0) gets.
    /// `receiveBuffer` sets SO_RCVBUF, so a server that stops reading pushes back quickly.
    public init(receiveBuffer: Int? = nil, script: @escaping @Sendable (Int) -> [Step]) async throws {
        let accepted = self.accepted, framesReceived = self.framesReceived, closes = self.closes
        var bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        if let receiveBuffer {
            bootstrap = bootstrap.serverChannelOption(.socketOption(.so_rcvbuf), value: receiveBuffer)
        }
        channel = try await bootstrap.childChannelInitializer { channel in
            let upgrader = NIOWebSocketServerUpgrader(
                maxFrameSize: 1 << 24, automaticErrorHandling: false,
                shouldUpgrade: { channel, _ in channel.eventLoop.makeSucceededFuture(HTTPHeaders()) },
                upgradePipelineHandler: { channel, _ in
                    let index = accepted.withLockedValue { n in
                        defer { n += 1 }; return n
                    }
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ScriptPlayer(steps: script(index), framesReceived: framesReceived, closes: closes))
                    }
                })
            return channel.pipeline.configureHTTPServerPipeline(
                withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
        }
        .bind(host: "127.0.0.1", port: 0).get()
    }

    public func stop() async {
        try? await channel.close()
    }
}

/// Plays the steps to one connection; reads frames only to count them and note close codes (no
/// pong, no close reply).
private final class ScriptPlayer: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var steps: ArraySlice<RawWebSocketServer.Step>
    private let framesReceived: NIOLockedValueBox<Int>
    private let closes: NIOLockedValueBox<[Int]>
    private var awaitingPing = false

    init(steps: [RawWebSocketServer.Step], framesReceived: NIOLockedValueBox<Int>, closes: NIOLockedValueBox<[Int]>) {
        self.steps = steps[...]
        self.framesReceived = framesReceived
        self.closes = closes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        playNext(context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary, .continuation: framesReceived.withLockedValue { $0 += 1 }
        case .connectionClose:
            var data = frame.unmaskedData
            let code = data.readInteger(as: UInt16.self).map(Int.init) ?? 1005
            closes.withLockedValue { $0.append(code) }
            context.close(promise: nil)
        case .ping where awaitingPing:
            awaitingPing = false
            playNext(context: context)
        default: break
        }
    }

    private func playNext(context: ChannelHandlerContext) {
        guard let step = steps.popFirst() else { return }
        switch step {
        case .text(let text):
            var buffer = context.channel.allocator.buffer(capacity: text.utf8.count)
            buffer.writeString(text)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
            playNext(context: context)
        case .binary(let bytes):
            let buffer = context.channel.allocator.buffer(bytes: bytes)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: buffer)), promise: nil)
            playNext(context: context)
        case .pause(let milliseconds):
            let later = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(milliseconds)) {
                let (player, context) = later.value
                player.playNext(context: context)
            }
        case .stopReading:
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
            playNext(context: context)
        case .awaitPing:
            awaitingPing = true
        }
    }
}
