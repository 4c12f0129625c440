import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TestSupport
import Testing

/// The forwarder that the connection-failure tests stand on: each way of failing does what it
/// says, seen from a plain TCP client with an echo server behind the link.
@Suite(.timeLimit(.minutes(10))) struct FlakyLinkTests {
    @Test func forwardPassesBytesBothWays() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port)
        let client = try await Client(port: link.port)

        try await client.send(Array("hello".utf8))
        #expect(await eventually { client.received == Array("hello".utf8) })

        // More than any socket buffer holds at once: it only arrives whole if back-pressure
        // is passed along instead of bytes being dropped.
        let big = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try await client.send(big)
        #expect(await eventually { client.received.count == 5 + big.count })
        #expect(client.received == Array("hello".utf8) + big)
        #expect(link.connections == 1)

        await client.close()
        #expect(await eventually { echo.closes == 1 })
        await link.stop()
        await echo.stop()
    }

    @Test func silentConnectionSwallowsWritesAndStaysOpen() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port)
        let client = try await Client(port: link.port)
        try await client.send(Array("one".utf8))
        #expect(await eventually { client.received == Array("one".utf8) })

        link.goSilent(0)
        try await client.send(Array("two".utf8))
        try await Task.sleep(for: .milliseconds(300))
        #expect(client.received == Array("one".utf8))
        #expect(echo.bytes == 3)
        #expect(client.isOpen)

        await client.close()
        await link.stop()
        await echo.stop()
    }

    @Test func neverAnswerReadsButNeverReplies() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port) { _ in .neverAnswer }
        let client = try await Client(port: link.port)

        try await client.send(Array("GET /v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n".utf8))
        try await Task.sleep(for: .milliseconds(300))
        #expect(client.received.isEmpty)
        #expect(client.isOpen)
        #expect(link.connections == 1)
        #expect(echo.accepted == 0)

        await client.close()
        await link.stop()
        await echo.stop()
    }

    @Test func stoppedReadingBlocksTheClientsWrites() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port, receiveBuffer: 4096)
        let client = try await Client(port: link.port)
        try await client.send(Array("hi".utf8))
        #expect(await eventually { client.received == Array("hi".utf8) })

        link.stopReading(0)
        // Each 64 KiB write completes once the kernel takes it; once the buffers on both ends
        // are full, one stops completing. 1024 chunks is far more than they hold.
        let chunk = [UInt8](repeating: 0x5A, count: 64 << 10)
        var blocked = false
        for _ in 0..<1024 {
            if await !client.sendCompletes(chunk, within: .seconds(2)) {
                blocked = true
                break
            }
        }
        #expect(blocked)
        #expect(echo.bytes == 2)

        await client.close()
        await link.stop()
        await echo.stop()
    }

    @Test func cutClosesBothSides() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port)
        let client = try await Client(port: link.port)
        try await client.send(Array("hi".utf8))
        #expect(await eventually { client.received == Array("hi".utf8) })

        link.cut(0)
        #expect(await eventually { !client.isOpen })
        #expect(await eventually { echo.closes == 1 })

        await link.stop()
        await echo.stop()
    }

    /// The trip wire: the server's bytes pass until the chosen words come the chosen time; those
    /// never arrive, and both sides are closed.
    @Test func theTripWireCutsWhenTheServerSaysTheWordsTheNthTime() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port, cutWhenServerSends: ("ok", 2))
        let client = try await Client(port: link.port)
        try await client.send(Array("ok".utf8))
        #expect(await eventually { client.received == Array("ok".utf8) })
        #expect(!link.tripped)
        try await client.send(Array("ok".utf8))
        #expect(await eventually { !client.isOpen })
        #expect(await eventually { echo.closes == 1 })
        #expect(link.tripped && client.received == Array("ok".utf8), "the second answer never came")
        await link.stop()
        await echo.stop()
    }

    @Test func eachConnectionStartsAsToldAndFailsAlone() async throws {
        let echo = try await EchoServer()
        let link = try await FlakyLink(targetPort: echo.port) { $0 == 0 ? .neverAnswer : .forward }
        let first = try await Client(port: link.port)
        let second = try await Client(port: link.port)
        let third = try await Client(port: link.port)
        #expect(await eventually { link.connections == 3 })

        link.goSilent(2)
        try await first.send(Array("a".utf8))
        try await second.send(Array("b".utf8))
        try await third.send(Array("c".utf8))
        #expect(await eventually { second.received == Array("b".utf8) })
        try await Task.sleep(for: .milliseconds(300))
        #expect(first.received.isEmpty)
        #expect(third.received.isEmpty)

        await link.stop()
        #expect(await eventually { !first.isOpen && !second.isOpen && !third.isOpen })
        await echo.stop()
    }
}

/// Echoes what it reads; counts connections, bytes and closes.
private final class EchoServer: Sendable {
    private let channel: any Channel
    private let counts = NIOLockedValueBox(Counts())
    var port: Int { channel.localAddress?.port ?? 0 }
    var accepted: Int { counts.withLockedValue { $0.accepted } }
    var bytes: Int { counts.withLockedValue { $0.bytes } }
    var closes: Int { counts.withLockedValue { $0.closes } }

    struct Counts {
        var accepted = 0, bytes = 0, closes = 0
    }

    init() async throws {
        let counts = self.counts
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                counts.withLockedValue { $0.accepted += 1 }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Echo(counts: counts))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() async {
        try? await channel.close()
    }

    private final class Echo: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let counts: NIOLockedValueBox<Counts>

        init(counts: NIOLockedValueBox<Counts>) {
            self.counts = counts
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            counts.withLockedValue { $0.bytes += buffer.readableBytes }
            context.write(wrapOutboundOut(buffer), promise: nil)
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            context.flush()
        }

        func channelInactive(context: ChannelHandlerContext) {
            counts.withLockedValue { $0.closes += 1 }
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}

/// A TCP client that keeps everything it hears.
private final class Client: Sendable {
    private let channel: any Channel
    private let heard = NIOLockedValueBox<[UInt8]>([])
    var received: [UInt8] { heard.withLockedValue { $0 } }
    var isOpen: Bool { channel.isActive }

    init(port: Int) async throws {
        let heard = self.heard
        channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Collector(heard: heard))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
    }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    /// Whether the kernel takes `bytes` within `timeout`; the write stays queued if not.
    func sendCompletes(_ bytes: [UInt8], within timeout: TimeAmount) async -> Bool {
        let loop = channel.eventLoop
        let done = loop.makePromise(of: Bool.self)
        let timer = loop.scheduleTask(in: timeout) { done.succeed(false) }
        channel.writeAndFlush(ByteBuffer(bytes: bytes)).whenComplete { result in
            timer.cancel()
            // A promise completed twice keeps its first value.
            done.succeed((try? result.get()) != nil)
        }
        return (try? await done.futureResult.get()) ?? false
    }

    func close() async {
        try? await channel.close()
    }

    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let heard: NIOLockedValueBox<[UInt8]>

        init(heard: NIOLockedValueBox<[UInt8]>) {
            self.heard = heard
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            heard.withLockedValue { $0 += buffer.readableBytesView }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
