import Foundation
import Logging
public import Mustache
public import Hummingbird

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
    /// The owners' pages, when the store keeps owners (it does for SQLite).
    public var owners: (any PairingStore & OwnerStore)?
    /// Their templates (``OwnerTemplates``).
    public var library: MustacheLibrary?
    /// Where their web sessions are kept (shared by every instance on the same database).
    public var sessionDriver: (any PersistDriver)?
    public var products: [Product] = []
    public var provider: (any PaymentProvider)?
    /// `usage.remainingSeconds`, for the pages' remaining usage.
    public var allowance: Int?
    public var secureCookies = false
    /// Whether the server has a mail relay (`mail.relay`): owners may ask for impact mails.
    public var mailRelay = false
    /// Cars unpaired at this instance: their access tokens are refused from then on.
    public let unpaired = UnpairedDevices()
    /// Milliseconds since the Unix epoch; tests pass their own clock.
    public var now: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }

    public init(store: any PairingStore, tokens: AccessTokens, verificationURI: String?) {
        self.store = store
        self.tokens = tokens
        self.verificationURI = verificationURI
    }

    func endpoints(logger: Logger) -> PairingEndpoints {
        PairingEndpoints(store: store, tokens: tokens, verificationURI: verificationURI, scheme: scheme, settings: authorization,
                         refreshLifetimeMs: refreshLifetimeMs, rules: refreshRules, unpaired: unpaired, logger: logger, now: now)
    }
}
