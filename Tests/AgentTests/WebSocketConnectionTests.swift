@testable import Agent
import Foundation
import GuidanceProtocol
import GuidanceServer
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization
import TestSupport
import Testing

/// The WebSocket client transport on loopback: against the reference server, plain HTTP
/// responders, a silent listener and a server that stops reading.
@Suite struct WebSocketConnectionTests {
    static let logger = Logger(label: "websocket-connection-test")
    static let hello = ClientMessage.hello(
        .init(
            device: "car-7", locale: "en-US", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000)))

    func options(port: Int, token: String? = nil, deadline: Duration = .seconds(5)) -> WebSocketConnectOptions {
        WebSocketConnectOptions(
            url: "ws://127.0.0.1:\(port)/v1/stream",
            headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [], deadline: deadline)
    }

    /// Starts the reference server; returns its task and the bound port.
    func startGuidanceServer() async throws -> (Task<Void, any Error>, Int) {
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0, idleTimeoutSeconds: 30),
            tokens: StaticDeviceTokens(["t0k3n": "car-7"]),
            analyzer: ScriptedAnalyzer(items: [], order: .seq), ledger: SQLiteLedger(path: ":memory:", logger: Self.logger),
            logger: Self.logger)
        let port = Mutex(0)
        let app = try ServerApplication(stream: server).build { bound in port.withLock { $0 = bound } }
        let task = Task { try await app.run() }
        while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        return (task, port.withLock { $0 })
    }

    /// The next message that is not a pong.
    func nextMessage(_ messages: inout AsyncStream<WebSocketInbound>.Iterator) async -> WebSocketInbound? {
        while let message = await messages.next() {
            if message != .pong { return message }
        }
        return nil
    }

    func connectFailure(_ options: WebSocketConnectOptions) async -> WebSocketConnectFailure? {
        do {
            let connection = try await WebSocketConnection.connect(options, logger: Self.logger)
            connection.abort()
            return nil
        } catch {
            return error
        }
    }

    @Test func helloGetsWelcomeAndPingGetsPong() async throws {
        let (server, port) = try await startGuidanceServer()
        defer { server.cancel() }
        let connection = try await WebSocketConnection.connect(options(port: port, token: "t0k3n"), logger: Self.logger)
        var messages = connection.inbound.makeAsyncIterator()
        try await connection.send(text: Self.hello.encoded())
        guard case .text(let text) = await nextMessage(&messages) else { Issue.record("no welcome"); return }
        guard case .welcome = try ServerMessage.decode(text) else { Issue.record("not a welcome: \(text)"); return }
        try await connection.ping()
        #expect(await messages.next() == .pong)
        await connection.close(code: 1000, reason: "done", grace: .seconds(2))
        guard case .closed(let code, _) = await nextMessage(&messages) else { Issue.record("no close"); return }
        #expect(code == 1000)
        #expect(await messages.next() == nil)
    }

    @Test func aCloseFromTheServerIsAnsweredAndEndsTheStream() async throws {
        let (server, port) = try await startGuidanceServer()
        defer { server.cancel() }
        // A newer connection of the same device supersedes the first: the server closes it with 4000.
        let first = try await WebSocketConnection.connect(options(port: port, token: "t0k3n"), logger: Self.logger)
        var firstMessages = first.inbound.makeAsyncIterator()
        try await first.send(text: Self.hello.encoded())
        #expect(await nextMessage(&firstMessages) != nil)
        let second = try await WebSocketConnection.connect(options(port: port, token: "t0k3n"), logger: Self.logger)
        defer { second.abort() }
        try await second.send(text: Self.hello.encoded())
        var last: WebSocketInbound?
        while let message = await firstMessages.next() { last = message }
        #expect(last == .closed(code: CloseCode.superseded.rawValue, reason: "superseded"))
        await #expect(throws: (any Error).self) { try await first.send(text: "late") }
    }

    @Test func aBadTokenIsRefusedWith401() async throws {
        let (server, port) = try await startGuidanceServer()
        defer { server.cancel() }
        #expect(await connectFailure(options(port: port, token: "wrong")) == .refused(status: 401, retryAfter: nil))
        #expect(await connectFailure(options(port: port)) == .refused(status: 401, retryAfter: nil))
    }

    @Test func aRefusalCarriesItsStatusAndRetryAfter() async throws {
        let busy = try await CannedHTTPServer(response: "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n")
        #expect(await connectFailure(options(port: busy.port)) == .refused(status: 503, retryAfter: .seconds(7)))
        await busy.stop()

        let missing = try await CannedHTTPServer(response: "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
        #expect(await connectFailure(options(port: missing.port)) == .refused(status: 404, retryAfter: nil))
        await missing.stop()

        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let date = format.string(from: Date().addingTimeInterval(30))
        let later = try await CannedHTTPServer(response: "HTTP/1.1 503 Busy\r\nRetry-After: \(date)\r\nContent-Length: 0\r\n\r\n")
        let failure = await connectFailure(options(port: later.port))
        guard case .refused(503, let retryAfter?) = failure else { Issue.record("\(String(describing: failure))"); return }
        #expect(retryAfter > .seconds(20) && retryAfter <= .seconds(30))
        await later.stop()
    }

    /// It gives up at the deadline, not before; a connect that never gave up would hang the test
    /// until its time limit. (How soon after the deadline depends on the machine's load: not asserted.)
    @Test(.timeLimit(.minutes(10))) func aServerThatNeverAnswersTimesOutAtTheDeadline() async throws {
        let silent = try await CannedHTTPServer(response: nil)
        let started = ContinuousClock.now
        #expect(await connectFailure(options(port: silent.port, deadline: .milliseconds(500))) == .timedOut(.milliseconds(500)))
        let took = ContinuousClock.now - started
        #expect(took >= .milliseconds(400), "gave up after \(took), before the deadline")
        await silent.stop()
    }

    @Test func cancellingConnectEndsItPromptly() async throws {
        let silent = try await CannedHTTPServer(response: nil)
        let connecting = Task { await connectFailure(options(port: silent.port, deadline: .seconds(60))) }
        try await Task.sleep(for: .milliseconds(200))
        connecting.cancel()
        // Only the cancel can end it this way: the deadline (60 s) would answer `.timedOut`.
        #expect(await connecting.value == .failed("cancelled"))
        await silent.stop()
    }

    @Test func aSendToAServerThatStopsReadingWaitsAndCancellingItClosesTheSocket() async throws {
        let server = try await RawWebSocketServer(receiveBuffer: 4096) { _ in [.stopReading] }
        let connection = try await WebSocketConnection.connect(options(port: server.port), logger: Self.logger)
        let sent = Counter()
        let chunk = [UInt8](repeating: 0x5a, count: 64 * 1024)[...]
        let sending = Task {
            while true {
                try await connection.send(binary: chunk)
                sent.add()
            }
        }
        // The sends stall once the socket buffers are full; none piles up without bound.
        // Stalled: some sends went through, then the count stood still for a whole interval. (A
        // sender that has not started yet under load is not a stall.)
        var previous = -1
        for _ in 0..<50 {
            let now = sent.value
            if now > 0, now == previous { break }
            previous = now
            try await Task.sleep(for: .milliseconds(300))
        }
        // However long it was given, what went out is bounded by the socket buffers.
        #expect(sent.value < 1000)
        // The send was blocked for good (the counter stood still): only the cancel can end it.
        sending.cancel()
        let result = await sending.result
        #expect(throws: (any Error).self) { try result.get() }
        var last: WebSocketInbound?
        for await message in connection.inbound { last = message }
        guard case .closed(nil, _) = last else { Issue.record("ended with \(String(describing: last))"); return }
        await server.stop()
    }

    @Test func closeSendsItsCodeOnceAndLaterSendsThrow() async throws {
        let server = try await RawWebSocketServer { _ in [] }
        let connection = try await WebSocketConnection.connect(options(port: server.port), logger: Self.logger)
        try await connection.send(text: "hi")
        await connection.close(code: 1001, reason: "going away", grace: .seconds(2))
        #expect(server.closeCodes == [1001])
        await #expect(throws: (any Error).self) { try await connection.send(text: "late") }
        await #expect(throws: (any Error).self) { try await connection.ping() }
        await connection.close(code: 1000, reason: "again", grace: .seconds(1))
        #expect(server.closeCodes == [1001])
        await server.stop()
    }

    @Test func anOversizedMessageClosesWith1009() async throws {
        let server = try await RawWebSocketServer { _ in [.text("small"), .awaitPing, .text(String(repeating: "x", count: 1 << 17))] }
        let connection = try await WebSocketConnection.connect(options(port: server.port), logger: Self.logger)
        try await connection.ping()
        var received: [WebSocketInbound] = []
        for await message in connection.inbound { received.append(message) }
        #expect(received.first == .text("small"))
        guard case .closed(nil, let reason) = received.last else { Issue.record("ended with \(received)"); return }
        #expect(reason.contains("65536"))
        for _ in 0..<100 where server.closeCodes.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.closeCodes == [1009])
        await server.stop()
    }

    @Test func messagesLeftUnreadPastTheBoundCloseWith1008() async throws {
        let server = try await RawWebSocketServer { _ in (0..<300).map { .text("m\($0)") } }
        let connection = try await WebSocketConnection.connect(options(port: server.port), logger: Self.logger)
        for _ in 0..<100 where server.closeCodes.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        #expect(server.closeCodes == [1008])
        var received: [WebSocketInbound] = []
        for await message in connection.inbound { received.append(message) }
        #expect(received.count == 257)
        #expect(Array(received.dropLast()) == (0..<256).map { .text("m\($0)") })
        guard case .closed(nil, _) = received.last else { Issue.record("ended with \(String(describing: received.last))"); return }
        await server.stop()
    }
}

private final class Counter: Sendable {
    private let count = Atomic(0)
    var value: Int { count.load(ordering: .relaxed) }
    func add() { count.add(1, ordering: .relaxed) }
}

/// Answers the first bytes of every connection with `response` and then half-closes; with `nil`
/// it accepts and never answers.
private final class CannedHTTPServer: Sendable {
    private let channel: any Channel
    var port: Int { channel.localAddress?.port ?? 0 }

    init(response: String?) async throws {
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(CannedAnswer(response: response))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() async {
        try? await channel.close()
    }
}

private final class CannedAnswer: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let response: String?
    private var answered = false

    init(response: String?) { self.response = response }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let response, !answered else { return }
        answered = true
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: response)), promise: nil)
        context.close(mode: .output, promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event { context.close(promise: nil) }
    }
}
