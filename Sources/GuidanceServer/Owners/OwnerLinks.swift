import Foundation

/// One-time links an operator hands to an owner: a random token, stored as its hash, spent by the
/// first password set with it, good for 24 hours.
public enum OwnerLinks {
    public static let lifetimeMs: Int64 = 24 * 3_600_000

    public static func passwordLink(owner: Int64, store: any OwnerStore, base: String, nowMs: Int64) async throws -> String {
        var generator = SystemRandomNumberGenerator()
        let token = DeviceCodes.newDeviceCode(using: &generator)
        try await store.addPasswordLink(owner: owner, tokenHash: PairingEndpoints.hash(token), expiresAtMs: nowMs + lifetimeMs)
        return base + "/set-password?token=" + token
    }
}

extension ServerConfig {
    /// Where the owners' pages are, as links to them say: `pairing.verificationURI` without its
    /// `/pair`, or this server's own address.
    public var pagesBaseURL: String {
        if let uri = pairing.verificationURI, uri.hasSuffix("/pair") { return String(uri.dropLast(5)) }
        return "\(server.usesTLS ? "https" : "http")://\(server.host):\(server.port)"
    }
}
