internal import Glibc

/// Tells when the way to the network changes, so that long-lived connections can be made again
/// at once instead of waiting for a timeout.
public protocol NetworkMonitor: Sendable {
    /// The path as last seen.
    var currentPath: NetworkPath { get }
    /// Every later change of ``currentPath``, in order. Each call gives a stream of its own; it
    /// ends when the monitor is closed. Dropping or cancelling its consumer unsubscribes it.
    func changes() -> AsyncStream<NetworkChange>
}

/// Why a network monitor could not start or read the kernel's state.
public struct NetworkMonitorError: Error, Equatable, CustomStringConvertible {
    private enum Kind: Equatable {
        case socket(Int32)
        case bind(groups: UInt32, Int32)
        case send(request: String, Int32)
        case receive(request: String, Int32)
        case kernel(request: String, Int32)
        case truncated(request: String, Int)
        case timedOut(request: String)
        case wake(Int32)
        case thread(Int32)
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    static func socket(_ code: Int32) -> Self { Self(.socket(code)) }
    static func bind(groups: UInt32, _ code: Int32) -> Self { Self(.bind(groups: groups, code)) }
    static func send(request: String, _ code: Int32) -> Self { Self(.send(request: request, code)) }
    static func receive(request: String, _ code: Int32) -> Self { Self(.receive(request: request, code)) }
    static func kernel(request: String, _ code: Int32) -> Self { Self(.kernel(request: request, code)) }
    static func truncated(request: String, size: Int) -> Self { Self(.truncated(request: request, size)) }
    static func timedOut(request: String) -> Self { Self(.timedOut(request: request)) }
    static func wake(_ code: Int32) -> Self { Self(.wake(code)) }
    static func thread(_ code: Int32) -> Self { Self(.thread(code)) }

    /// The `errno` behind the error, if there is one.
    public var code: Int32? {
        switch kind {
        case .socket(let code), .bind(_, let code), .send(_, let code), .receive(_, let code), .kernel(_, let code),
            .wake(let code), .thread(let code):
            code
        case .truncated, .timedOut:
            nil
        }
    }

    public var description: String {
        switch kind {
        case .socket(let code):
            "Cannot open a NETLINK_ROUTE socket to watch the network: \(Self.text(code))."
        case .bind(let groups, let code):
            "Cannot subscribe to rtnetlink groups 0x\(String(groups, radix: 16)) to watch the network: \(Self.text(code))."
        case .send(let request, let code):
            "Cannot send the \(request) request to the kernel: \(Self.text(code))."
        case .receive(let request, let code):
            "Cannot read the kernel's answer to \(request): \(Self.text(code))."
        case .kernel(let request, let code):
            "The kernel refused the \(request) dump: \(Self.text(code))."
        case .truncated(let request, let size):
            "The kernel's answer to \(request) (\(size) bytes) did not fit the receive buffer."
        case .timedOut(let request):
            "The kernel did not answer the \(request) dump in time."
        case .wake(let code):
            "Cannot create the eventfd that stops the network monitor's thread: \(Self.text(code))."
        case .thread(let code):
            "Cannot start the network monitor's thread: \(Self.text(code))."
        }
    }

    private static func text(_ code: Int32) -> String {
        "\(String(cString: strerror(code))) (errno \(code))"
    }
}
