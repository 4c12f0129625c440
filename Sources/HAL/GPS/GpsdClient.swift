import NIOCore
import NIOPosix

/// What a GPS receiver's connection tells.
public enum GPSEvent: Sendable, Equatable {
    /// Connected; gpsd's release.
    case connected(String)
    case fix(GPSFix)
    /// The connection ended or could not be made; tried again after `retryIn`.
    case lost(String, retryIn: Duration)
    /// A line that is not gpsd's JSON, or gpsd's own `ERROR` (what it said, cut short).
    case unreadable(String)
}

/// A GPS receiver: the events of its connection, in order, until the task that runs it ends.
public protocol GPSReceiver: Sendable {
    /// Where it reads from, for the logs and `status` (`127.0.0.1:2947`).
    var name: String { get }
    /// Connects, reads, and connects again whenever the connection ends, until cancelled.
    func run(_ events: @escaping @Sendable (GPSEvent) async -> Void) async
}

/// gpsd's JSON protocol over TCP (``GpsdReport``), no C library: asks for every fix with
/// `?WATCH`, reads line by line (``GpsdLineReader``), and when gpsd goes away tries again after
/// a wait that doubles from 1 s to at most 30 s (back to 1 s once connected). It tells what it
/// read as events and logs nothing itself: what a peer sends is the consumer's to log, at its pace.
public struct GpsdClient: GPSReceiver {
    public let host: String
    public let port: Int
    public var name: String { "\(host):\(port)" }
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, `[v6]:port` or `host` (gpsd's port, 2947); nil if it is none of those.
    public static func address(_ text: String) -> (host: String, port: Int)? {
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            let host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            if rest.isEmpty { return host.isEmpty ? nil : (host, 2947) }
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (1...65535).contains(port), !host.isEmpty else { return nil }
            return (host, port)
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: return text.isEmpty ? nil : (text, 2947)
        case 2:
            guard !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else { return nil }
            return (String(parts[0]), port)
        default: return nil
        }
    }

    public func run(_ events: @escaping @Sendable (GPSEvent) async -> Void) async {
        var wait = Duration.seconds(1)
        while !Task.isCancelled {
            let reason: String
            do {
                reason = try await session(events) { wait = .seconds(1) }
            } catch is CancellationError {
                return
            } catch {
                reason = "\(error)"
            }
            guard !Task.isCancelled else { return }
            await events(.lost(reason, retryIn: wait))
            try? await Task.sleep(for: wait)
            wait = min(wait * 2, .seconds(30))
        }
    }

    /// One connection, until it ends; why it ended.
    private func session(_ events: @escaping @Sendable (GPSEvent) async -> Void, connected: () -> Void) async throws -> String {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await withTaskCancellationHandler {
            try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(ByteBuffer(string: GpsdReport.watchCommand))
                var reader = GpsdLineReader()
                var dropped = 0
                for try await buffer in inbound {
                    for line in reader.append(buffer.readableBytesView) {
                        switch GpsdReport.parse(line) {
                        case .version(let release, _, _)?:
                            connected()
                            await events(.connected(release))
                        case .fix(let fix)?:
                            await events(.fix(fix))
                        case .error(let message)?:
                            await events(.unreadable("gpsd says: \(message)"))
                        case nil:
                            await events(.unreadable("a line that is not gpsd's JSON (\(line.count) bytes)"))
                        default:
                            break
                        }
                    }
                    if reader.dropped > dropped {
                        dropped = reader.dropped
                        await events(.unreadable("a line over \(GpsdLineReader.maxLine) bytes, dropped"))
                    }
                }
                return reader.dropped > 0
                    ? "gpsd closed the connection (\(reader.dropped) overlong line(s) dropped)" : "gpsd closed the connection"
            }
        } onCancel: {
            channel.channel.close(promise: nil)
        }
    }
}
