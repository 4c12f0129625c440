public import Hummingbird
public import Mustache

/// What the owners' pages need besides pairing's store and tokens: their templates, where their
/// web sessions are kept, what can be bought there and who takes the payment.
public struct OwnerSite: Sendable {
    /// The pages' templates (``OwnerTemplates``).
    public var library: MustacheLibrary
    /// Where web sessions are kept (shared by every instance on the same database).
    public var sessionDriver: any PersistDriver
    public var products: [Product] = []
    public var provider: (any PaymentProvider)?
    /// `usage.remainingSeconds`, for the pages' remaining usage.
    public var allowance: Int?
    /// Cookies carry `Secure`: the pages are reached over HTTPS.
    public var secureCookies = false
    /// Whether the server has a mail relay (`mail.relay`): owners may ask for impact mails.
    public var mailRelay = false
}
