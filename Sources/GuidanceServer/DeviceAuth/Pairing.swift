import Foundation
import Logging
import Hummingbird

/// Everything pairing needs at run time: where pairings are stored, how access tokens are signed,
/// and the numbers of the rules (`pairing.*` in the server's config).
public struct Pairing: Sendable {
    public var store: any PairingStore
    public var tokens: AccessTokens
    /// The page an owner types a car's code on (`verification_uri`); `nil`: this server's `/pair`
    /// at the address the car reached it by (its `Host`), with `scheme`.
    public var verificationURI: String?
    public var scheme = "http"
    public var authorization = DeviceAuthorization.Settings()
    public var refreshLifetimeMs: Int64 = 90 * 86_400_000
    public var refreshRules = RefreshTokenRules()
    /// Owners and what they own (cars, trips), when the store keeps them (SQLite and PostgreSQL do).
    public var owners: (any PairingStore & OwnerStore)?
    /// The owners' pages, with what can be bought there.
    public var site: OwnerSite?
    /// Cars unpaired at this instance: their access tokens are refused from then on.
    public let unpaired = UnpairedDevices()
    /// Milliseconds since the Unix epoch; tests pass their own clock.
    public var now: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }

    func endpoints(logger: Logger) -> PairingEndpoints {
        PairingEndpoints(
            store: store, tokens: tokens, verificationURI: verificationURI, scheme: scheme, settings: authorization,
            refreshLifetimeMs: refreshLifetimeMs, rules: refreshRules, unpaired: unpaired, logger: logger, now: now)
    }
}
