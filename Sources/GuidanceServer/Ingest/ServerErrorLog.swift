import Foundation
import HTTPTypes
public import Hummingbird
public import Logging

/// Every request the server answers with a 5xx writes one error line naming the method, the path
/// (never the query: a link's token travels there) and the cause, at most one a second (``LogLimit``:
/// a wedged server answering every request 500 must not flood the log either); each is counted
/// in `guidance_http_server_errors_total`. Before, a server whose database was locked answered
/// 500 to every owner and car and said nothing.
public struct ServerErrorLog<Context: RequestContext>: RouterMiddleware {
    let logger: Logger
    let metrics: ServerMetrics
    let limit: LogLimit

    public init(logger: Logger, metrics: ServerMetrics) {
        self.init(logger: logger, metrics: metrics, limit: LogLimit())
    }

    init(logger: Logger, metrics: ServerMetrics, limit: LogLimit) {
        self.logger = logger
        self.metrics = metrics
        self.limit = limit
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            if response.status.code >= 500 { record(request, status: Int(response.status.code), cause: "answered by the route") }
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            if status >= 500 { record(request, status: Int(status), cause: String(describing: error)) }
            throw error
        }
    }

    private func record(_ request: Request, status: Int, cause: String) {
        metrics.serverError()
        limit.log(logger, .error, "\(request.method) \(request.uri.path) answered \(status): \(cause)")
    }
}

/// Whether a request reached the server over HTTPS, and what follows from it: `Secure` on every
/// cookie and `Strict-Transport-Security` on every answer. HTTPS is the server's own TLS, a
/// configured `https://` address for the owners' pages (`pairing.verificationURI`), or a proxy on
/// this machine (a loopback peer) that says so in `X-Forwarded-Proto` (the shipped nginx site
/// does). The header is trusted from no other peer: anyone could send it.
public struct SecureTransport<Context: RequestContext>: RouterMiddleware {
    /// Every request is HTTPS (TLS here, or the configured public address is https).
    let always: Bool
    let peer: @Sendable (Context) -> String?

    static var hsts: String { "max-age=31536000" }

    public init(always: Bool, peer: @escaping @Sendable (Context) -> String?) {
        self.always = always
        self.peer = peer
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        guard always || LocalProxy.forwardedHTTPS(request, peer: peer(context)) else { return response }
        response.headers[.strictTransportSecurity] = Self.hsts
        let cookies = response.headers[values: .setCookie]
        if cookies.contains(where: { !Self.isSecure($0) }) {
            response.headers[.setCookie] = nil
            for cookie in cookies {
                response.headers.append(.init(name: .setCookie, value: Self.isSecure(cookie) ? cookie : cookie + "; Secure"))
            }
        }
        return response
    }

    static func isSecure(_ cookie: String) -> Bool {
        cookie.split(separator: ";").contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "secure" }
    }
}

/// A proxy on this machine: the only peer whose `X-Real-IP` and `X-Forwarded-Proto` are believed.
enum LocalProxy {
    static func isLoopback(_ address: String) -> Bool {
        address == "::1" || address.hasPrefix("127.") || address == "::ffff:127.0.0.1"
    }

    static func forwardedHTTPS(_ request: Request, peer: String?) -> Bool {
        guard let peer, isLoopback(peer) else { return false }
        return request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() == "https"
    }
}
