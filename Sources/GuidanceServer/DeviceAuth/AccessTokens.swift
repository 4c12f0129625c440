import Crypto
import Foundation

/// A paired device's short-lived access token: a JWT (RFC 7519) signed with HMAC-SHA256 under
/// the server's signing key (`pairing.signingKeyFile`, the same on every instance), naming the
/// device (`sub`), its owner, and when it expires. The WebSocket upgrade takes it as
/// `Authorization: Bearer …` like a static token.
///
/// Made with swift-crypto directly, not jwt-kit: the upgrade is refused or let through inside a
/// synchronous NIO handler (``UpgradeAuthGate``), and jwt-kit's verification is asynchronous
/// (its key collection is an actor); one algorithm, one key and five claims are all this needs.
/// Only `{"alg":"HS256","typ":"JWT"}` is accepted, so no token chooses its own algorithm.
public struct AccessTokens: Sendable {
    public static let issuer = "guidance-server"
    public static let audience = "guidance-stream"
    /// Longest token read; anything longer is refused before it is decoded.
    public static let maxLength = 2048

    /// The key's bytes (`SymmetricKey` is not `Sendable` in this swift-crypto).
    private let keyBytes: [UInt8]
    private var key: SymmetricKey { SymmetricKey(data: keyBytes) }
    public let lifetimeSeconds: Int64

    /// `key`: at least 32 bytes.
    public init(key: [UInt8], lifetimeSeconds: Int64 = 600) {
        self.keyBytes = key
        self.lifetimeSeconds = lifetimeSeconds
    }

    public struct Claims: Codable, Sendable, Equatable {
        public var iss: String
        public var aud: String
        /// The device id.
        public var sub: String
        public var owner: Int64
        public var iat: Int64
        public var exp: Int64
    }

    private static let header = base64URL(Data(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    public func issue(device: String, owner: Int64, nowSeconds: Int64) -> (token: String, claims: Claims) {
        let claims = Claims(
            iss: Self.issuer, aud: Self.audience, sub: device, owner: owner, iat: nowSeconds,
            exp: nowSeconds + lifetimeSeconds)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let payload = Self.base64URL((try? encoder.encode(claims)) ?? Data())
        let signingInput = Self.header + "." + payload
        let signature = HMAC<SHA256>.authenticationCode(for: Data(signingInput.utf8), using: key)
        return (signingInput + "." + Self.base64URL(Data(signature)), claims)
    }

    /// The claims of a token this server signed that has not expired at `nowSeconds`; `nil` for
    /// anything else.
    public func verify(_ token: String, nowSeconds: Int64) -> Claims? {
        guard token.utf8.count <= Self.maxLength else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == Self.header[...],
            let signature = Self.unbase64URL(parts[2]), signature.count == SHA256.byteCount,
            HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: Data("\(parts[0]).\(parts[1])".utf8), using: key),
            let payload = Self.unbase64URL(parts[1]),
            let claims = try? JSONDecoder().decode(Claims.self, from: payload),
            claims.iss == Self.issuer, claims.aud == Self.audience, !claims.sub.isEmpty,
            nowSeconds < claims.exp, claims.iat <= nowSeconds + 60
        else { return nil }
        return claims
    }

    /// The refresh token that follows `presented`: an HMAC of it under the signing key, so that a
    /// retry of the same token (a car that lost the answer) is handed the very same successor,
    /// and a copy presented within the retry window gets nothing the car does not also hold.
    /// Unguessable without `presented`; every instance derives the same one.
    public func refreshSuccessor(of presented: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data(("refresh-successor:" + presented).utf8), using: key)
        return Self.base64URL(Data(mac))
    }

    /// An HMAC of `text` under the signing key, for another use than access tokens (`purpose`
    /// keeps the uses apart): every instance computes the same one.
    func mac(_ purpose: String, _ text: String) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: Data((purpose + ":" + text).utf8), using: key))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func unbase64URL(_ text: Substring) -> Data? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
