/// What arrives on an open connection.
public enum WebSocketInbound: Sendable, Equatable {
    /// A whole text message. One that is not valid UTF-8 is logged and skipped.
    case text(String)
    case binary([UInt8])
    /// The answer to a ping.
    case pong
    /// The connection ended; always the last element. `code` is the peer's close code (1005 for a close
    /// frame without one); `nil` when the socket closed without one or this side failed the
    /// connection (a message too big, a protocol error, too many unread messages): `reason` says why.
    case closed(code: UInt16?, reason: String)
}
