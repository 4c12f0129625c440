/// How often a user code may be typed wrong (RFC 8628 §5.1): nine digits are about 30 bits, so
/// guessing is slowed per owner account and per address. The rule is pure: the ledger counts the
/// failures (so every instance behind the proxy sees the same ones) and this says whether one
/// more try is let through, and when.
public struct CodeEntryLimiter: Sendable, Equatable {
    /// Wrong codes allowed in one window, for one account or one address.
    public var maxFailures: Int
    public var windowMs: Int64

    /// Five wrong codes in 15 minutes per account, 20 per address (a household or an office
    /// behind one address): 10^9 codes then take thousands of years to walk.
    public static let perAccount = CodeEntryLimiter(maxFailures: 5, windowMs: 15 * 60_000)
    public static let perAddress = CodeEntryLimiter(maxFailures: 20, windowMs: 15 * 60_000)

    /// Sign-in: ten wrong passwords in 15 minutes per account from one client address, thirty per
    /// address; past them the answer is the same whether or not the account exists.
    public static let signInPerAccount = CodeEntryLimiter(maxFailures: 10, windowMs: 15 * 60_000)
    public static let signInPerAddress = CodeEntryLimiter(maxFailures: 30, windowMs: 15 * 60_000)
    /// Password links tried per address (a link is 128 random bits: this only bounds the work).
    public static let linksPerAddress = CodeEntryLimiter(maxFailures: 20, windowMs: 15 * 60_000)

    /// No limiter's window is longer: tries older than this are forgotten.
    public static let longestWindowMs: Int64 = 15 * 60_000

    /// What a typed pairing code counts against, at every route that takes one.
    public static func pairing(owner: Int64, address: String) -> [Throttle] {
        [Throttle("owner:\(owner)", perAccount), Throttle("address:\(address)", perAddress)]
    }

    /// Sign-in tries at one account from all addresses together: high enough that a stranger who
    /// knows only the owner's address cannot keep them out from one or a few addresses.
    public static let signInPerAccountEverywhere = CodeEntryLimiter(maxFailures: 100, windowMs: 15 * 60_000)

    /// What a sign-in counts against: the address typed (hashed: the table holds no addresses),
    /// known or not, from this client and from everywhere, and the client's address.
    public static func signIn(email: String, address: String) -> [Throttle] {
        let account = PairingEndpoints.hash(email)
        return [
            Throttle("signin-account:\(account)@\(address)", signInPerAccount),
            Throttle("signin-account:\(account)", signInPerAccountEverywhere), Throttle("signin-address:\(address)", signInPerAddress)
        ]
    }

    public enum Verdict: Sendable, Equatable {
        case allowed
        /// Refused until the oldest failure in the window leaves it.
        case wait(seconds: Int)
    }

    /// `failures`: the times of the wrong entries the ledger holds for this key, in any order (older
    /// ones are ignored).
    public func verdict(failures: [Int64], nowMs: Int64) -> Verdict {
        let inWindow = failures.filter { $0 > nowMs - windowMs && $0 <= nowMs }.sorted()
        guard inWindow.count >= maxFailures else { return .allowed }
        // The try is let through once enough of them have aged out.
        let freeing = inWindow[inWindow.count - maxFailures]
        let waitMs = freeing + windowMs - nowMs
        return .wait(seconds: Int(max(1, (waitMs + 999) / 1000)))
    }
}
