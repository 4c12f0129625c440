import Foundation
public import Logging
import NIOCore
import NIOPosix

/// The running agent's local control socket: one request line in, one reply out, then closed.
///
/// Requests: `status` answers the ``AgentStatus`` as JSON; `say-status` makes the device speak the
/// remaining usage and answers what it said. The socket file is made readable and writable by
/// the agent's user only.
public enum StatusSocket {
    /// Serves `path` until the task is cancelled; `answer` turns a request line into a reply.
    public static func serve(path: String, logger: Logger, answer: @escaping @Sendable (String) async -> String) async {
        do {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            chmod(path, 0o600)
            logger.info("status: answering on \(path)")
            try await withTaskCancellationHandler {
                try await withThrowingDiscardingTaskGroup { group in
                    try await server.executeThenClose { connections in
                        for try await connection in connections {
                            group.addTask {
                                try? await connection.executeThenClose { inbound, outbound in
                                    var request = ""
                                    for try await buffer in inbound {
                                        request += String(buffer: buffer)
                                        if request.contains("\n") || request.utf8.count > 1024 { break }
                                    }
                                    let reply = await answer(request.trimmingCharacters(in: .whitespacesAndNewlines))
                                    try await outbound.write(ByteBuffer(string: reply + "\n"))
                                }
                            }
                        }
                    }
                }
            } onCancel: {
                server.channel.close(promise: nil)
            }
        } catch is CancellationError {
            // The agent is stopping.
        } catch {
            logger.warning("status: cannot answer on \(path): \(error); `dashcam-agent status` will not reach this agent")
        }
        try? FileManager.default.removeItem(atPath: path)
    }

    public struct Unreachable: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "no running agent answers on \(path) (status.socket): \(reason)" }
    }

    /// Sends one request to the agent on `path` and returns its reply.
    public static func ask(_ request: String, path: String) async throws -> String {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(2))
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
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
