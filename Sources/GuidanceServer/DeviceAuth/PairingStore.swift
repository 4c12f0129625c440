/// Where pairings live: device authorizations (RFC 8628), paired devices and their refresh-token
/// families, and the wrong code entries the limiter counts. In the ledger's database, next to
/// the usage it charges (``SQLitePairingStore``). Each method is one transaction that applies
/// the pure rules (``DeviceAuthorization``, ``RefreshTokenRules``, ``CodeEntryLimiter``) to
/// what is stored; nothing here sees a raw device code or refresh token, only their hashes.
public protocol PairingStore: Sendable {
    /// Stores a new authorization for `deviceName` under `deviceCodeHash`, with a user code from
    /// `newUserCode` that no live authorization has; returns that code.
    func startAuthorization(
        deviceCodeHash: String, deviceName: String, nowMs: Int64,
        settings: DeviceAuthorization.Settings,
        newUserCode: @escaping @Sendable () -> String
    ) async throws -> (userCode: String, authorization: DeviceAuthorization)

    /// One poll of the token endpoint. On ``DeviceAuthorization/PollOutcome/issue(owner:)`` the
    /// device `newDevice` is paired to the owner and its refresh family started with
    /// `refreshTokenHash`, in the same transaction.
    func poll(
        deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll

    /// The pending authorization an owner typed the code of, for the approval page; every wrong
    /// code counts against the owner and the address (``CodeEntryLimiter/pairing(owner:address:)``),
    /// and past their limits no code is looked at. A code found is this owner's to decide.
    func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp

    /// An owner's answer to a pending authorization, under the same limits as ``lookUp``: only a
    /// code this owner looked up is decided; any other is a wrong guess, counted against the
    /// owner, the address and (if it exists) the code itself, which is locked (denied) after
    /// ``CodeDecision/maxWrongDecisions``.
    func decide(
        userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision

    /// Spends a refresh token for its successor (`newTokenHash`), by ``RefreshTokenRules``. The
    /// successor is derived from the token (``AccessTokens/refreshSuccessor(of:)``), so a retry
    /// within the grace is handed the same successor again; a retry whose successor differs is
    /// treated as reuse.
    func refresh(
        tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult

    /// One try at something guessable (a password, a link), counted before it is checked,
    /// against every key of `throttles`; the wait in seconds, with nothing counted, when a key is
    /// over its limit. One transaction: concurrent tries cannot all slip under the limit.
    func attempt(_ throttles: [Throttle], nowMs: Int64) async throws -> Int?

    /// Takes back the tries ``attempt(_:nowMs:)`` counted at `atMs` under `keys`: the try succeeded.
    func forgive(_ keys: [String], atMs: Int64) async throws

    /// A paired device, or `nil` (never paired, or unpaired).
    func pairedDevice(_ device: String) async throws -> PairedDevice?

    /// Adds an owner; returns its id.
    func addOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64

    func owner(id: Int64) async throws -> Owner?

    /// Closes the store; nothing may be called afterwards.
    func shutdown() async throws
}

public enum PairingPoll: Sendable, Equatable {
    /// No authorization has that device code: `invalid_grant`.
    case unknown
    case outcome(DeviceAuthorization.PollOutcome)
    /// Paired: hand out credentials for this device.
    case paired(PairedDevice)
}

public enum CodeLookUp: Sendable, Equatable {
    case pending(deviceName: String, secondsLeft: Int)
    /// No live, pending authorization has that code (wrong, expired or decided).
    case wrong
    /// Too many wrong codes lately, from this owner or this address.
    case limited(waitSeconds: Int)
}

/// What became of an owner's answer to a code.
public enum CodeDecision: Sendable, Equatable {
    /// Wrong guesses against one code before it is locked.
    public static let maxWrongDecisions = 3

    /// One more wrong guess against a code that had `wrong` of them: how many it has now, and
    /// whether that locks it (only a pending code is locked). Both stores apply this one rule.
    public static func guessed(wrong: Int, pending: Bool) -> (wrong: Int, locked: Bool) {
        (wrong + 1, pending && wrong + 1 >= maxWrongDecisions)
    }

    case decided
    /// The code was this owner's to decide, and is no longer pending (expired, or decided).
    case gone
    /// No such code, or one this owner never looked up: counted as a wrong guess.
    case wrong
    /// A wrong guess that locked the code: the car is refused and offers a new one.
    case locked
    /// Too many wrong codes lately, from this owner or this address.
    case limited(waitSeconds: Int)
}

/// A key that tries are counted against, and its limit.
public struct Throttle: Sendable, Equatable {
    public var key: String
    public var limiter: CodeEntryLimiter

    public init(_ key: String, _ limiter: CodeEntryLimiter) {
        self.key = key
        self.limiter = limiter
    }
}

public enum RefreshResult: Sendable, Equatable {
    case rotated(PairedDevice)
    /// Unknown, expired, revoked, or the device unpaired.
    case refused
    /// A spent token came back: its family is revoked now.
    case reused(device: String)
}

public struct PairedDevice: Sendable, Equatable {
    /// The id the ledger charges and the access token names: given by the server at pairing.
    public var device: String
    public var owner: Int64
    /// What the car called itself; the owner may rename it.
    public var label: String
    public var pairedAtMs: Int64
}

public struct Owner: Sendable, Equatable {
    public var id: Int64
    public var email: String
    public var displayName: String
}
