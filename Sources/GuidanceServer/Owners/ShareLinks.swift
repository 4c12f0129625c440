import Foundation

/// The links an owner gives to show one clip to someone without an account: the clip, the link's
/// id and its expiry, signed with the server's signing key (`pairing.signingKeyFile`), so every
/// instance checks them alike and nobody makes one for another clip or a later expiry. Whether a
/// link was revoked is the clip's record (``ClipShare``), read at every use.
struct ShareLinks: Sendable {
    let tokens: AccessTokens

    /// What a link grants.
    struct Grant: Codable, Equatable, Sendable {
        /// The owner who made it: the link works only while the car is still theirs.
        var owner: Int64
        var device: String
        var clip: String
        var share: String
        /// Expiry, seconds since 1970.
        var expires: Int64
    }

    static let purpose = "clip-share"
    static let maxLength = 1024

    func token(_ grant: Grant) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let payload = AccessTokens.base64URL((try? encoder.encode(grant)) ?? Data())
        return payload + "." + AccessTokens.base64URL(tokens.mac(Self.purpose, payload))
    }

    /// The grant of a link this server signed that has not expired; nil for anything else.
    func verify(_ token: String, nowSeconds: Int64) -> Grant? {
        guard token.utf8.count <= Self.maxLength else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        // The signature compared as text, as it is written: one link has one spelling.
        guard parts.count == 2,
            Self.same(Data(parts[1].utf8), Data(AccessTokens.base64URL(tokens.mac(Self.purpose, String(parts[0]))).utf8)),
            let payload = AccessTokens.unbase64URL(parts[0]),
            let grant = try? JSONDecoder().decode(Grant.self, from: payload), nowSeconds < grant.expires
        else { return nil }
        return grant
    }

    /// Constant time in the length of `b`.
    static func same(_ a: Data, _ b: Data) -> Bool {
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
