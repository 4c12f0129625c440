/// The rules of a device's refresh tokens (OAuth 2.0 Security BCP, refresh token rotation): every
/// use spends the token and hands out its successor; the tokens handed out one after another for
/// one pairing are a family. A spent token presented again means a copy exists somewhere, so the
/// whole family is revoked and the car must be paired again, with one exception: a car on a
/// patchy link that sent its refresh and lost the answer presents the same token again moments
/// later. Within ``graceMs`` of spending it, and while its successor has never been used, that is
/// a retry: it gets a new successor, and the one it never received is dropped.
///
/// Pure: the ledger looks the token up (by its hash) and applies the verdict in one transaction.
public struct RefreshTokenRules: Sendable, Equatable {
    /// How long after a token is spent the same token still counts as a retry.
    public var graceMs: Int64 = 30_000

    public init(graceMs: Int64 = 30_000) { self.graceMs = graceMs }

    /// A presented token as the ledger found it.
    public struct Presented: Sendable, Equatable {
        /// The family was revoked (reuse seen, or the owner unpaired the car).
        public var familyRevoked: Bool
        /// When the token was spent; `nil`: it is the family's current token.
        public var spentAtMs: Int64?
        /// Its successor has itself been used (spent), so the device did receive it.
        public var successorUsed: Bool
        public var expiresAtMs: Int64
    }

    public enum Verdict: Sendable, Equatable {
        /// Spend it, hand out a successor.
        case rotate
        /// The same token again within the grace: drop the successor it never got, hand out another.
        case retry
        /// A spent token used again: revoke the family (`invalid_grant`).
        case reuse
        /// Revoked or expired: `invalid_grant`, nothing changes.
        case refuse
    }

    public func judge(_ token: Presented, nowMs: Int64) -> Verdict {
        if token.familyRevoked { return .refuse }
        guard let spentAt = token.spentAtMs else {
            return nowMs < token.expiresAtMs ? .rotate : .refuse
        }
        if !token.successorUsed, nowMs >= spentAt, nowMs - spentAt <= graceMs { return .retry }
        return .reuse
    }
}
