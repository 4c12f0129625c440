/// Why no WebSocket opened.
public enum WebSocketConnectFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server answered the upgrade with this HTTP status instead of 101.
    case refused(status: Int, retryAfter: Duration?)
    /// The deadline passed before the upgrade finished; the socket is closed.
    case timedOut(Duration)
    /// Bad URL, DNS, TCP or TLS failure, an invalid upgrade answer, or cancellation.
    case failed(String)

    public var description: String {
        switch self {
        case .refused(let status, let retryAfter):
            "the server refused the upgrade with HTTP \(status)" + (retryAfter.map { " (retry after \($0))" } ?? "")
        case .timedOut(let deadline): "no WebSocket within \(deadline)"
        case .failed(let reason): reason
        }
    }
}
