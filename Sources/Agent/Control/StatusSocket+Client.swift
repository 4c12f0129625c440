import Glibc
import NIOCore
import NIOPosix

/// The other end: what `dashcam-agent status`, `say-status` and `protect` use to ask the running agent.
extension StatusSocket {
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
            } catch  where turnedAway(error) && ContinuousClock.now < deadline {
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
