import Foundation
public import Logging
import NIOCore
public import ServiceLifecycle

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
    let logger: Logger
    private let answer: @Sendable (String) async -> String
    let gate: Gate

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
    struct Request: Sendable {
        let line: String
        let channel: any Channel
    }

    private func reply(to request: Request) async {
        let reply = await answer(request.line)
        Self.send(reply, on: request.channel, deadline: limits.readTimeout)
    }

    /// Writes one line and closes; a client that does not read it is closed after `deadline`.
    static func send(_ reply: String, on channel: any Channel, deadline: Duration) {
        channel.eventLoop.execute {
            let closing = channel.eventLoop.scheduleTask(in: TimeAmount(deadline)) { channel.close(promise: nil) }
            channel.writeAndFlush(ByteBuffer(string: reply + "\n")).whenComplete { _ in
                closing.cancel()
                channel.close(promise: nil)
            }
        }
    }
}
