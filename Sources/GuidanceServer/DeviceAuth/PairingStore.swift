/// Where pairings live: device authorizations (RFC 8628), paired devices and their refresh-token
/// families, and the wrong code entries the limiter counts. In the ledger's database, next to
/// the usage it charges (``SQLitePairingStore``). Each method is one transaction that applies
/// the pure rules (``DeviceAuthorization``, ``RefreshTokenRules``, ``CodeEntryLimiter``) to
/// what is stored; nothing here sees a raw device code or refresh token, only their hashes.
public protocol PairingStore: Sendable {
    /// Stores a new authorization for `deviceName` under `deviceCodeHash`, with a user code from
    /// `newUserCode` that no live authorization has; returns that code.
    func startAuthorization(deviceCodeHash: String, deviceName: String, nowMs: Int64,
                            settings: DeviceAuthorization.Settings,
                            newUserCode: @Sendable () -> String) async throws -> (userCode: String, authorization: DeviceAuthorization)

    /// One poll of the token endpoint. On ``DeviceAuthorization/PollOutcome/issue(owner:)`` the
    /// device `newDevice` is paired to the owner and its refresh family started with
    /// `refreshTokenHash`, in the same transaction.
    func poll(deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
              newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64) async throws -> PairingPoll

    /// The pending authorization an owner typed the code of, for the approval page; every wrong
    /// code counts against the owner and the address.
    func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp

    /// An owner's answer to a pending authorization.
    func decide(userCode: String, decision: DeviceAuthorization.Decision, nowMs: Int64) async throws -> DeviceAuthorization.DecisionOutcome?

    /// Spends a refresh token for a new one (`newTokenHash`), by ``RefreshTokenRules``.
    func refresh(tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
                 rules: RefreshTokenRules) async throws -> RefreshResult

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

    public init(device: String, owner: Int64, label: String, pairedAtMs: Int64) {
        self.device = device
        self.owner = owner
        self.label = label
        self.pairedAtMs = pairedAtMs
    }
}

public struct Owner: Sendable, Equatable {
    public var id: Int64
    public var email: String
    public var displayName: String
}
