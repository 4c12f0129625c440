public import NIOSSL

/// Where and how ``WebSocketConnection/connect(_:logger:group:)`` connects.
public struct WebSocketConnectOptions: Sendable {
    /// `ws://host[:port]/path` or `wss://…`.
    public var url: String
    /// Extra request headers, such as `Authorization`; their values are never logged.
    public var headers: [(String, String)]
    /// Required for `wss://` (the URL's host is the server name); unused for `ws://`.
    public var tls: TLSConfiguration?
    /// For connect, TLS handshake and HTTP upgrade together.
    public var deadline: Duration
    /// TCP_USER_TIMEOUT: how long sent data may stay unacknowledged before the kernel drops the connection.
    public var userTimeout: Duration
    /// TCP keepalive: first probe after this much silence, then every `keepaliveInterval`, `keepaliveCount` times.
    public var keepaliveIdle: Duration
    public var keepaliveInterval: Duration
    public var keepaliveCount: Int
    /// The largest inbound message, after reassembly; a larger one ends the connection with 1009.
    public var maxMessageBytes: Int

    public init(
        url: String, headers: [(String, String)] = [], tls: TLSConfiguration? = nil,
        deadline: Duration = .seconds(5), userTimeout: Duration = .seconds(10),
        keepaliveIdle: Duration = .seconds(5), keepaliveInterval: Duration = .seconds(2), keepaliveCount: Int = 3,
        maxMessageBytes: Int = 64 * 1024
    ) {
        self.url = url
        self.headers = headers
        self.tls = tls
        self.deadline = deadline
        self.userTimeout = userTimeout
        self.keepaliveIdle = keepaliveIdle
        self.keepaliveInterval = keepaliveInterval
        self.keepaliveCount = keepaliveCount
        self.maxMessageBytes = maxMessageBytes
    }
}
