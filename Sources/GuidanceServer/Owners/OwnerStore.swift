public import Foundation

/// What the owners' pages keep: accounts and their one-time password links, the cars each owner
/// paired, the last guidance each car was given, their drives (``TripStore``), and purchases. In the ledger's database beside
/// pairings and usage (``SQLitePairingStore``); one transaction per call.
public protocol OwnerStore: TripStore {
    /// A new owner with no password yet; `nil` if the address has an account already.
    func createOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64?
    /// Stores a one-time link token (its hash) to set `owner`'s password, valid until `expiresAtMs`.
    func addPasswordLink(owner: Int64, tokenHash: String, expiresAtMs: Int64) async throws
    /// The owner a live (unused, unexpired) link is for: checked before a password is hashed.
    func passwordLinkOwner(tokenHash: String, nowMs: Int64) async throws -> Int64?
    /// Spends a password link: sets the owner's password hash, spends every other link of that
    /// owner and ends all their web sessions; the owner, or `nil` if the link is unknown, used or
    /// expired.
    func usePasswordLink(tokenHash: String, passwordHash: String, nowMs: Int64) async throws -> Int64?
    /// The owner's web sessions that have not expired (``WebSessionRows``).
    func webSessions(owner: Int64, nowMs: Int64) async throws -> [StoredWebSession]
    /// Ends one of the owner's web sessions (its stored id); `false` if it is not theirs or gone.
    func endWebSession(owner: Int64, id: String) async throws -> Bool
    /// The owner's password hash (`nil` before one is set, or no such owner).
    func passwordHash(owner: Int64) async throws -> String?
    /// The owner with this address and their password hash (`nil` before one is set).
    func account(email: String) async throws -> (owner: Owner, passwordHash: String?)?

    /// How the owner's pages show times and numbers (nothing chosen: UTC, the browser's language),
    /// and whether they want impact mails.
    func preferences(owner: Int64) async throws -> OwnerPreferences
    func setPreferences(owner: Int64, _ preferences: OwnerPreferences) async throws

    /// The owner's cars, paired first first.
    func devices(owner: Int64) async throws -> [OwnedDevice]
    /// Renames a car of this owner; `false` if it is not theirs.
    func rename(device: String, owner: Int64, label: String) async throws -> Bool
    /// Unpairs a car of this owner: its refresh tokens are revoked; `false` if it is not theirs.
    func unpair(device: String, owner: Int64, nowMs: Int64) async throws -> Bool
    /// Cars unpaired at or after `sinceMs` (at any instance), with when.
    func unpaired(sinceMs: Int64) async throws -> [(device: String, atMs: Int64)]
    /// The car opened a session (last seen).
    func seen(device: String, nowMs: Int64) async throws
    /// Guidance the car was given; the last ``OwnedDevice/recentGuidanceCount`` are kept.
    func recordGuidance(device: String, text: String, nowMs: Int64) async throws

    /// A purchase started by an owner, waiting for the provider's webhook.
    func startPayment(_ payment: Payment) async throws
    func payment(provider: String, id: String) async throws -> Payment?
    /// The provider's word on a payment: paid credits the car's usage, once per payment id
    /// whatever repeats; returns whether this call was the one that credited.
    func settlePayment(provider: String, id: String, paid: Bool, nowMs: Int64) async throws -> Bool
}

public struct OwnedDevice: Sendable, Equatable {
    public static let recentGuidanceCount = 5
    public var device: String
    public var label: String
    public var pairedAtMs: Int64
    public var lastSeenAtMs: Int64?
    /// Newest first: (time, text).
    public var recentGuidance: [(atMs: Int64, text: String)]

    public static func == (a: Self, b: Self) -> Bool {
        a.device == b.device && a.label == b.label && a.pairedAtMs == b.pairedAtMs && a.lastSeenAtMs == b.lastSeenAtMs
            && a.recentGuidance.map(\.atMs) == b.recentGuidance.map(\.atMs) && a.recentGuidance.map(\.text) == b.recentGuidance.map(\.text)
    }
}

public struct Payment: Sendable, Equatable {
    public enum Status: String, Sendable { case pending, paid, declined }
    public var provider: String
    public var id: String
    public var owner: Int64
    public var device: String
    public var product: String
    public var seconds: Int
    /// As shown to the owner, e.g. `4.99 EUR`.
    public var price: String
    public var status: Status = .pending
    public var createdAtMs: Int64
}

/// A web session as stored: its id (the hash of its key, never the cookie's value), its value
/// (a ``WebSession`` as JSON) and when it expires.
public struct StoredWebSession: Sendable, Equatable {
    public var id: String
    public var value: Data
    public var expiresAtMs: Int64?
}

/// What an owner chose for their pages: an IANA time zone (`Asia/Seoul`) and one of the languages
/// the cars speak (`ko`); nil is not chosen yet. And whether they want an e-mail when a parked
/// car of theirs records an impact (``ImpactMail``; off until they turn it on).
public struct OwnerPreferences: Sendable, Equatable {
    public var timeZone: String? = nil
    public var language: String? = nil
    public var impactMail: Bool = false
}
