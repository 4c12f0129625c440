/// The statements pairing needs, in one SQL dialect, inside one transaction: all that differs
/// between the SQLite store and the PostgreSQL one. What is done with them, and in what order,
/// is ``PairingSteps``, written once for both.
protocol PairingStatements: Sendable {
    /// Forgets authorizations that expired at or before `nowMs` (their codes are free again).
    func deleteExpiredAuthorizations(nowMs: Int64) async throws
    func liveAuthorizations() async throws -> Int
    /// Stores a new pending authorization under `userCode`; false when a live one has that code.
    func insertAuthorization(deviceCodeHash: String, userCode: String, _ authorization: DeviceAuthorization) async throws -> Bool
    /// The authorization with this device-code hash or user code, held against other instances
    /// until the transaction ends (where the dialect locks rows); nil if none, or unreadable.
    func authorization(_ key: AuthorizationKey) async throws -> StoredAuthorization?
    /// A poll's changes: the state, the interval (slowed down), when it was polled.
    func savePoll(deviceCodeHash: String, _ authorization: DeviceAuthorization) async throws
    /// A decision: the state and, when approved, its owner.
    func saveDecision(deviceCodeHash: String, _ state: DeviceAuthorization.State) async throws
    /// The owner who looked the code up first, the only one who may decide it.
    func saveLookUp(deviceCodeHash: String, by owner: Int64) async throws
    /// Wrong guesses against the code, and its state (denied once locked).
    func saveGuesses(deviceCodeHash: String, wrong: Int, _ state: DeviceAuthorization.State) async throws
    /// A new pairing: the device, its refresh family `family` and the family's first token.
    func insertPairing(_ device: PairedDevice, family: String, refreshTokenHash: String, refreshExpiresAtMs: Int64) async throws

    /// Holds the code-entry counts of every one of `keys` until the transaction ends, where the
    /// dialect needs it (several instances count at once); nothing where transactions already
    /// run one at a time.
    func holdCodeEntries(keys: [String]) async throws
    /// Forgets wrong entries at or before `beforeMs`.
    func deleteCodeEntryFailures(atOrBeforeMs: Int64) async throws
    func codeEntryFailures(key: String) async throws -> [Int64]
    func addCodeEntryFailure(key: String, atMs: Int64) async throws
    /// Takes back one entry of `key` at `atMs`: another counted in the same millisecond stays.
    func forgiveCodeEntryFailure(key: String, atMs: Int64) async throws

    /// A refresh token as presented, with its family and device, held until the transaction ends.
    func refreshToken(hash: String) async throws -> StoredRefreshToken?
    func spendRefreshToken(hash: String, successor: String, nowMs: Int64) async throws
    func insertRefreshToken(hash: String, family: String, issuedAtMs: Int64, expiresAtMs: Int64) async throws
    /// The family's tokens refused from now on, and its device unpaired.
    func revoke(family: String, device: String, nowMs: Int64) async throws
}

/// How an authorization is found: by its device code's hash (the car's polls) or its user code
/// (what the owner types).
enum AuthorizationKey: Sendable {
    case deviceCodeHash(String)
    case userCode(String)
}

/// An authorization as a store keeps it.
struct StoredAuthorization: Sendable {
    var deviceCodeHash: String
    var authorization: DeviceAuthorization
    /// The owner who looked the code up first.
    var lookedUpBy: Int64?
    /// Wrong decisions made against the code (``CodeDecision/guessed(wrong:pending:)``).
    var wrongDecisions: Int
}

/// A refresh token as a store keeps it, with what ``RefreshTokenRules`` judges.
struct StoredRefreshToken: Sendable {
    var family: String
    /// The successor handed out when it was spent, if it was.
    var successor: String?
    var presented: RefreshTokenRules.Presented
    /// The family's device, as paired (its owner 0 once it is not).
    var device: PairedDevice
}

/// The steps of pairing, on the statements of either store (``PairingStatements``): each is the
/// body of one transaction, applying the pure rules (``DeviceAuthorization``,
/// ``RefreshTokenRules``, ``CodeEntryLimiter``) to what is stored. ``PairingStore`` documents
/// each step.
enum PairingSteps {
    /// Live codes at most, across all addresses (a fleet pairs a handful at a time).
    static let maxLiveAuthorizations = 10_000

    static func startAuthorization(
        _ db: some PairingStatements, deviceCodeHash: String, deviceName: String, nowMs: Int64,
        settings: DeviceAuthorization.Settings, newUserCode: @Sendable () -> String
    ) async throws -> (userCode: String, authorization: DeviceAuthorization) {
        let authorization = DeviceAuthorization(deviceName: deviceName, nowMs: nowMs, settings: settings)
        // Codes of expired authorizations are free again.
        try await db.deleteExpiredAuthorizations(nowMs: nowMs)
        // However many peers ask, the table holds at most this many live codes.
        guard try await db.liveAuthorizations() < maxLiveAuthorizations else { throw PairingFull() }
        // 10^9 codes and at most thousands live: a clash is rare, and the next code is tried.
        for _ in 0..<16 {
            let userCode = newUserCode()
            if try await db.insertAuthorization(deviceCodeHash: deviceCodeHash, userCode: userCode, authorization) {
                return (userCode, authorization)
            }
        }
        throw LedgerError.unavailable("no free user code after 16 tries")
    }

    static func poll(
        _ db: some PairingStatements, deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll {
        guard var found = try await db.authorization(.deviceCodeHash(deviceCodeHash))?.authorization else { return .unknown }
        let outcome = found.poll(nowMs: nowMs, settings: settings)
        try await db.savePoll(deviceCodeHash: deviceCodeHash, found)
        guard case .issue(let owner) = outcome else { return .outcome(outcome) }
        let device = PairedDevice(device: newDevice, owner: owner, label: found.deviceName, pairedAtMs: nowMs)
        try await db.insertPairing(
            device, family: newDevice + "/" + String(nowMs), refreshTokenHash: refreshTokenHash, refreshExpiresAtMs: refreshExpiresAtMs)
        return .paired(device)
    }

    static func lookUp(_ db: some PairingStatements, userCode: String, owner: Int64, address: String, nowMs: Int64) async throws
        -> CodeLookUp
    {
        let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
        if let wait = try await limited(db, throttles, nowMs: nowMs) { return .limited(waitSeconds: wait) }
        if let found = try await db.authorization(.userCode(userCode)), found.authorization.state == .pending,
            !found.authorization.isExpired(nowMs: nowMs)
        {
            if found.lookedUpBy == nil || found.lookedUpBy == owner {
                // Only the owner who saw this page first may decide the code.
                try await db.saveLookUp(deviceCodeHash: found.deviceCodeHash, by: owner)
                return .pending(deviceName: found.authorization.deviceName, secondsLeft: found.authorization.secondsLeft(nowMs: nowMs))
            }
            // Another account typed a code someone already looked up: a guess against it.
            let (wrong, locked) = CodeDecision.guessed(wrong: found.wrongDecisions, pending: true)
            try await db.saveGuesses(deviceCodeHash: found.deviceCodeHash, wrong: wrong, locked ? .denied : .pending)
        }
        try await count(db, throttles, nowMs: nowMs)
        return .wrong
    }

    static func decide(
        _ db: some PairingStatements, userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision {
        let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
        if let wait = try await limited(db, throttles, nowMs: nowMs) { return .limited(waitSeconds: wait) }
        guard var found = try await db.authorization(.userCode(userCode)) else {
            try await count(db, throttles, nowMs: nowMs)
            return .wrong
        }
        guard found.lookedUpBy == owner else {
            // A decision on a code this owner never looked up: a guess against that code.
            try await count(db, throttles, nowMs: nowMs)
            let (wrong, locked) = CodeDecision.guessed(wrong: found.wrongDecisions, pending: found.authorization.state == .pending)
            try await db.saveGuesses(deviceCodeHash: found.deviceCodeHash, wrong: wrong, locked ? .denied : found.authorization.state)
            return locked ? .locked : .wrong
        }
        guard found.authorization.decide(decision, nowMs: nowMs) == .decided else { return .gone }
        try await db.saveDecision(deviceCodeHash: found.deviceCodeHash, found.authorization.state)
        return .decided
    }

    static func attempt(_ db: some PairingStatements, _ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        if let wait = try await limited(db, throttles, nowMs: nowMs) { return wait }
        try await count(db, throttles, nowMs: nowMs)
        return nil
    }

    static func forgive(_ db: some PairingStatements, _ keys: [String], atMs: Int64) async throws {
        for key in keys { try await db.forgiveCodeEntryFailure(key: key, atMs: atMs) }
    }

    /// How long until a try is let through, if any key of `throttles` is over its limit now.
    static func limited(_ db: some PairingStatements, _ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        // Tries against one key are counted one transaction at a time: a burst cannot all read
        // the count before any of them adds to it. Every key: tries from different owners share
        // their address's key.
        try await db.holdCodeEntries(keys: throttles.map(\.key))
        try await db.deleteCodeEntryFailures(atOrBeforeMs: nowMs - CodeEntryLimiter.longestWindowMs)
        for throttle in throttles {
            let tries = try await db.codeEntryFailures(key: throttle.key)
            if case .wait(let seconds) = throttle.limiter.verdict(failures: tries, nowMs: nowMs) { return seconds }
        }
        return nil
    }

    static func count(_ db: some PairingStatements, _ throttles: [Throttle], nowMs: Int64) async throws {
        for throttle in throttles { try await db.addCodeEntryFailure(key: throttle.key, atMs: nowMs) }
    }

    static func refresh(
        _ db: some PairingStatements, tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult {
        guard let token = try await db.refreshToken(hash: tokenHash) else { return .refused }
        let device = token.device.device
        switch rules.judge(token.presented, nowMs: nowMs) {
        case .refuse:
            return .refused
        case .reuse:
            try await db.revoke(family: token.family, device: device, nowMs: nowMs)
            return .reused(device: device)
        case .rotate:
            try await db.spendRefreshToken(hash: tokenHash, successor: newTokenHash, nowMs: nowMs)
        case .retry:
            // The same successor as the first time, or it is a copy that diverged: reuse.
            guard token.successor == newTokenHash else {
                try await db.revoke(family: token.family, device: device, nowMs: nowMs)
                return .reused(device: device)
            }
            return .rotated(token.device)
        }
        try await db.insertRefreshToken(hash: newTokenHash, family: token.family, issuedAtMs: nowMs, expiresAtMs: expiresAtMs)
        return .rotated(token.device)
    }

    /// A state's name in the `state` column.
    static func stateName(_ state: DeviceAuthorization.State) -> String {
        switch state {
        case .pending: "pending"
        case .approved: "approved"
        case .denied: "denied"
        case .redeemed: "redeemed"
        }
    }

    /// The state of a `state` column and its `owner`; nil for a name not known, or an approval
    /// without an owner.
    static func state(named name: String?, owner: Int64?) -> DeviceAuthorization.State? {
        switch name {
        case "pending": .pending
        case "approved": owner.map { .approved(owner: $0) }
        case "denied": .denied
        case "redeemed": .redeemed
        default: nil
        }
    }

    /// The `owner` column of a state: the approving owner, else none.
    static func owner(of state: DeviceAuthorization.State) -> Int64? {
        if case .approved(let owner) = state { return owner }
        return nil
    }
}
