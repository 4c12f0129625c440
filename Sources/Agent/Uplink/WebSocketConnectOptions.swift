public import NIOSSL

/// Where and how ``WebSocketConnection/connect(_:logger:group:)`` connects.
public struct WebSocketConnectOptions: Sendable {
    /// `ws://host[:port]/path` or `wss://…`.
    public var url: String
    /// Extra request headers, such as `Authorization`; their values are never logged.
    public var headers: [(String, String)] = []
    /// Required for `wss://` (the URL's host is the server name); unused for `ws://`.
    public var tls: TLSConfiguration? = nil
    /// For connect, TLS handshake and HTTP upgrade together.
    public var deadline: Duration = .seconds(5)
    /// TCP_USER_TIMEOUT: how long sent data may stay unacknowledged before the kernel drops the connection.
    public var userTimeout: Duration = .seconds(10)
    /// TCP keepalive: first probe after this much silence, then every `keepaliveInterval`, `keepaliveCount` times.
    public var keepaliveIdle: Duration = .seconds(5)
    public var keepaliveInterval: Duration = .seconds(2)
    public var keepaliveCount: Int = 3
    /// The largest inbound message, after reassembly; a larger one ends the connection with 1009.
    public var maxMessageBytes: Int = 64 * 1024
}
