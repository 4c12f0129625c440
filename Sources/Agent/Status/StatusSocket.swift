import Foundation
import Glibc
import GuidanceProtocol
import HAL
public import Logging
import NIOCore
import NIOPosix
public import ServiceLifecycle
import Synchronization

/// The running agent's local control socket: one request line in, one reply out, then closed.
///
/// Requests: `status` answers the ``AgentStatus`` as JSON; `say-status` makes the device speak the
/// remaining usage and answers what it said; `protect …` keeps segments.
///
/// - Important: The socket file is mode 0600 from the moment it exists: it is bound in a private
///   folder (mode 0700) beside `path`, then renamed into place. At most
///   ``Limits-swift.struct/connections`` clients are served at once; one more is told it is busy
///   and closed at once, so clients that connect and say nothing cannot use up the agent's file
///   descriptors (the segment files need them). A client that has not sent its line within
///   ``Limits-swift.struct/readTimeout`` is closed; a line longer than
///   ``Limits-swift.struct/requestBytes`` gets an error. ``run()`` ends on cancellation or a
///   graceful shutdown and removes the socket file, unless another process has replaced it.
public struct StatusSocket: Service {
    public struct Limits: Sendable, Equatable {
        /// The socket's clients are people and scripts asking one question: a few at once at
        /// most. Eight leaves room for a polling script while the descriptors it can hold stay
        /// far below `LimitNOFILE`.
        public var connections = 8
        /// `dashcam-agent status` writes its line as soon as it connects: two seconds is a long
        /// wait for it, and the longest an idle client holds a slot.
        public var readTimeout: Duration = .seconds(2)
        /// The longest request, `protect time MS MS`, is under 50 bytes.
        public var requestBytes = 4096

        public init(connections: Int = 8, readTimeout: Duration = .seconds(2), requestBytes: Int = 4096) {
            self.connections = connections
            self.readTimeout = readTimeout
            self.requestBytes = requestBytes
        }
    }

    public let path: String
    public let limits: Limits
    private let logger: Logger
    private let answer: @Sendable (String) async -> String
    private let gate: Gate

    /// `answer` turns a request line (without its newline) into a reply line.
    public init(path: String, logger: Logger, limits: Limits = Limits(), answer: @escaping @Sendable (String) async -> String) {
        self.path = path
        self.logger = logger
        self.limits = limits
        self.answer = answer
        self.gate = Gate(limit: limits.connections)
    }

    /// Serves `path` until the task is cancelled; logs why if the socket cannot be made.
    /// The shape the agent started the socket with before it was a ``Service``.
    public static func serve(path: String, logger: Logger, answer: @escaping @Sendable (String) async -> String) async {
        try? await StatusSocket(path: path, logger: logger, answer: answer).run()
    }

    /// Answers until cancelled or shut down gracefully, then removes the socket file.
    /// Throws (after logging it) when the socket cannot be made; the agent records without it.
    public func run() async throws {
        // Connections are read on the event loop (cap, deadline, size); whole request lines come
        // here to be answered, each in a child task.
        let (requests, sink) = AsyncStream.makeStream(of: Request.self)
        let server: any Channel
        let identity: FileIdentity
        do {
            (server, identity) = try await bind(requests: sink)
        } catch {
            logger.warning("status: cannot answer on \(path): \(error); `dashcam-agent status` will not reach this agent")
            throw error
        }
        defer { identity.removeIfUnchanged(path) }
        logger.info("status: answering on \(path)")
        let gate = self.gate
        await withTaskCancellationOrGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await request in requests {
                    group.addTask { await reply(to: request) }
                }
            }
        } onCancelOrGracefulShutdown: {
            server.close(promise: nil)
            sink.finish()
            gate.closeAll()
        }
    }

    /// A whole request line and the connection it came on.
    private struct Request: Sendable {
        let line: String
        let channel: any Channel
    }

    private func reply(to request: Request) async {
        let reply = await answer(request.line)
        Self.send(reply, on: request.channel, deadline: limits.readTimeout)
    }

    /// Writes one line and closes; a client that does not read it is closed after `deadline`.
    private static func send(_ reply: String, on channel: any Channel, deadline: Duration) {
        channel.eventLoop.execute {
            let closing = channel.eventLoop.scheduleTask(in: TimeAmount(deadline)) { channel.close(promise: nil) }
            channel.writeAndFlush(ByteBuffer(string: reply + "\n")).whenComplete { _ in
                closing.cancel()
                channel.close(promise: nil)
            }
        }
    }

    // MARK: - Connections

    /// The reply to a client over the cap; ``ask(_:path:patience:)`` tries again on it.
    static let busyReply = #"{"busy":true,"error":"the agent is answering as many requests as it takes at once; try again"}"#

    /// Admits the connection under the cap, or tells it it is busy and closes it.
    private func setUp(_ channel: any Channel, requests: AsyncStream<Request>.Continuation) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            guard gate.enter(channel) else {
                report(.overCap)
                try channel.pipeline.syncOperations.addHandler(BusyHandler())
                return
            }
            channel.closeFuture.whenComplete { [gate] _ in gate.leave(channel) }
            let limits = self.limits
            try channel.pipeline.syncOperations.addHandler(RequestHandler(limits: limits, report: report) { line in
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
                let error = ControlRequests.json(["error": "request longer than \(limits.requestBytes) bytes; send one line: `status`, `say-status` or `protect …`"])
                StatusSocket.send(error, on: context.channel, deadline: limits.readTimeout)
                return
            }
            received(String(decoding: bytes[..<end!], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }

    private func report(_ refusal: Refusal) {
        guard let counts = gate.count(refusal) else { return }
        logger.warning("status: refused \(counts.overCap) connection(s) over the cap of \(limits.connections), closed \(counts.timedOut) that sent no request within \(limits.readTimeout) and \(counts.tooLong) with a request over \(limits.requestBytes) bytes (totals; logged at most once a minute)")
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
    private final class Gate: Sendable {
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

    // MARK: - The socket file

    public struct SetupError: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "\(path): \(reason)" }
    }

    /// Which file the socket is, so that shutting down removes it only if it is still ours.
    private struct FileIdentity {
        let device: UInt
        let inode: UInt

        init?(_ path: String) {
            var info = stat()
            guard lstat(path, &info) == 0 else { return nil }
            device = UInt(info.st_dev)
            inode = UInt(info.st_ino)
        }

        func removeIfUnchanged(_ path: String) {
            guard let now = FileIdentity(path), now.device == device, now.inode == inode else { return }
            unlink(path)
        }
    }

    /// Binds in a fresh private folder beside `path`, where nobody else can reach the socket,
    /// makes it 0600, then renames it over `path` (replacing a socket an earlier run left).
    private func bind(requests: AsyncStream<Request>.Continuation) async throws -> (any Channel, FileIdentity) {
        let folder = (path as NSString).deletingLastPathComponent
        let parent = folder.isEmpty ? "." : folder
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        var existing = stat()
        if lstat(path, &existing) == 0, existing.st_mode & S_IFMT != S_IFSOCK {
            throw SetupError(path: path, reason: "exists and is not a socket; remove it or choose another status.socket")
        }
        var template = Array("\(parent)/.sock-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SetupError(path: path, reason: "cannot make a private folder in \(parent): \(String(cString: strerror(errno)))")
        }
        let privateFolder = String(cString: made)
        let temporary = privateFolder + "/s"
        defer {
            unlink(temporary)
            rmdir(privateFolder)
        }
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 16)
            .childChannelInitializer { channel in setUp(channel, requests: requests) }
            .bind(unixDomainSocketPath: temporary).get()
        do {
            guard chmod(temporary, 0o600) == 0 else {
                throw SetupError(path: temporary, reason: "chmod 0600: \(String(cString: strerror(errno)))")
            }
            guard rename(temporary, path) == 0 else {
                throw SetupError(path: path, reason: "cannot move the socket into place: \(String(cString: strerror(errno)))")
            }
            guard let identity = FileIdentity(path) else {
                throw SetupError(path: path, reason: "the socket vanished as it was made: \(String(cString: strerror(errno)))")
            }
            return (server, identity)
        } catch {
            try? await server.close()
            throw error
        }
    }

    // MARK: - Asking

    public struct Unreachable: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "no running agent answers on \(path) (status.socket): \(reason)" }
    }

    /// The socket is there but this user may not use it (it is mode 0600, owned by the agent's user).
    public struct NotPermitted: Error, CustomStringConvertible {
        public let path: String
        public var description: String {
            "permission denied on \(path) (status.socket): it is open only to the agent's own user (dashcam-agent when installed) and root; run the command with sudo"
        }
    }

    /// Sends one request to the agent on `path` and returns its reply. While the agent is busy
    /// with as many clients as it takes, or closes before it read the request, asks again for up
    /// to `patience`.
    public static func ask(_ request: String, path: String, patience: Duration = .seconds(10)) async throws -> String {
        let deadline = ContinuousClock.now + patience
        while true {
            do {
                let reply = try await askOnce(request, path: path)
                // Busy, or closed with no reply at all: the agent's read timeout came before the
                // request (a machine too busy to read it in time). Both are worth another try.
                guard reply.hasPrefix(busyReply) || reply.isEmpty, ContinuousClock.now < deadline else { return reply }
            } catch where turnedAway(error) && ContinuousClock.now < deadline {
                // Turned away before the request was written or read: the busy line is lost.
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// A connection closed on the client before its reply: the agent's busy close reached it
    /// first (an unread request makes the kernel reset instead of delivering the busy line), or
    /// a full accept queue refused the connect.
    private static func turnedAway(_ error: any Error) -> Bool {
        switch error {
        case let error as IOError: [ECONNRESET, EPIPE, EAGAIN].contains(error.errnoCode)
        case let error as ChannelError: [.ioOnClosedChannel, .alreadyClosed, .outputClosed, .eof].contains(error)
        default: false
        }
    }

    private static func askOnce(_ request: String, path: String) async throws -> String {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(2))
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch let error as IOError where error.errnoCode == EAGAIN {
            throw error
        } catch let error as IOError where error.errnoCode == EACCES || error.errnoCode == EPERM {
            throw NotPermitted(path: path)
        } catch {
            throw Unreachable(path: path, reason: "\(error)")
        }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: request + "\n"))
            var reply = ""
            for try await buffer in inbound { reply += String(buffer: buffer) }
            return reply
        }
    }
}
