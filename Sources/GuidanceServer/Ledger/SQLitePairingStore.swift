import Foundation
public import Logging
import NIOPosix
import SQLiteNIO
import Synchronization

/// Pairings in the ledger's SQLite file (schema 3 of ``SQLiteLedger``), on a connection of their
/// own: a pairing step is several statements in one transaction, and on the ledger's shared
/// connection a charge could land inside it (and be rolled back with it after being
/// acknowledged). Transactions on this connection run one at a time, in arrival order;
/// `BEGIN IMMEDIATE` takes the file's write lock first, so a second server on the same file (or
/// `guidance-server owner add`) waits its turn instead of failing half way.
public final class SQLitePairingStore: PairingStore {
    let connection: SQLiteConnection
    private let turns = Turns()
    private let path: String
    let logger: Logger
    /// The connection's own thread. `BEGIN IMMEDIATE` waits (sleeping, up to the busy timeout) on
    /// the thread it runs on while another connection or process holds the write lock. On the
    /// shared pool, two such waits took both of a 2-core machine's threads, and the holder's next
    /// statement (queued behind them) could not run to release the lock: every charge and page
    /// stalled until the waits failed, 10 s later.
    private let thread: NIOThreadPool

    public static func open(path: String, logger: Logger) async throws -> SQLitePairingStore {
        let thread = NIOThreadPool(numberOfThreads: 1)
        thread.start()
        do {
            return SQLitePairingStore(
                connection: try await SQLiteLedger.prepare(path: path, threadPool: thread, logger: logger), path: path,
                logger: logger, thread: thread)
        } catch {
            try? await thread.shutdownGracefully()
            throw error
        }
    }

    private init(connection: SQLiteConnection, path: String, logger: Logger, thread: NIOThreadPool) {
        self.connection = connection
        self.path = path
        self.logger = logger
        self.thread = thread
    }

    /// Whether ``shutdown()`` closed the connection (SQLiteNIO must be closed once, before its end).
    private let closed = Mutex(false)

    /// Live codes at most, across all addresses (a fleet pairs a handful at a time).
    static let maxLiveAuthorizations = 10_000

    public func shutdown() async throws {
        guard
            closed.withLock({ closed in
                defer { closed = true }; return !closed
            })
        else { return }
        try await connection.close()
        try await thread.shutdownGracefully()
    }

    /// A store dropped without ``shutdown()`` still closes its file.
    deinit {
        guard !closed.withLock({ $0 }) else { return }
        let (connection, thread) = (self.connection, self.thread)
        Task {
            try? await connection.close()
            try? await thread.shutdownGracefully()
        }
    }

    public func startAuthorization(
        deviceCodeHash: String, deviceName: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newUserCode: @escaping @Sendable () -> String
    ) async throws -> (userCode: String, authorization: DeviceAuthorization) {
        let authorization = DeviceAuthorization(deviceName: deviceName, nowMs: nowMs, settings: settings)
        return try await transaction { db in
            // Codes of expired authorizations are free again.
            _ = try await db.query("DELETE FROM device_authorizations WHERE expires_at <= ?", [.integer(Int(nowMs))])
            // However many peers ask, the table holds at most this many live codes.
            let live = try await db.query("SELECT count(*) AS n FROM device_authorizations").first?.column("n")?.integer ?? 0
            guard live < Self.maxLiveAuthorizations else { throw PairingFull() }
            // 10^9 codes and at most thousands live: a clash is rare, and the next code is tried.
            for _ in 0..<16 {
                let userCode = newUserCode()
                let taken = try await db.query("SELECT 1 FROM device_authorizations WHERE user_code = ?", [.text(userCode)])
                guard taken.isEmpty else { continue }
                _ = try await db.query(
                    """
                    INSERT INTO device_authorizations (device_code_hash, user_code, device_name, state, owner, issued_at,
                        expires_at, interval_s, last_polled_at) VALUES (?, ?, ?, 'pending', NULL, ?, ?, ?, NULL)
                    """,
                    [
                        .text(deviceCodeHash), .text(userCode), .text(deviceName), .integer(Int(authorization.issuedAtMs)),
                        .integer(Int(authorization.expiresAtMs)), .integer(authorization.intervalSeconds)
                    ])
                return (userCode, authorization)
            }
            throw LedgerError.unavailable("no free user code after 16 tries")
        }
    }

    public func poll(
        deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll {
        try await transaction { db in
            guard
                let row = try await db.query(
                    "SELECT * FROM device_authorizations WHERE device_code_hash = ?", [.text(deviceCodeHash)]
                ).first,
                var authorization = Self.authorization(row)
            else { return .unknown }
            let outcome = authorization.poll(nowMs: nowMs, settings: settings)
            _ = try await db.query(
                "UPDATE device_authorizations SET state = ?, interval_s = ?, last_polled_at = ? WHERE device_code_hash = ?",
                [
                    .text(Self.stateName(authorization.state)), .integer(authorization.intervalSeconds),
                    authorization.lastPolledAtMs.map { .integer(Int($0)) } ?? .null, .text(deviceCodeHash)
                ])
            guard case .issue(let owner) = outcome else { return .outcome(outcome) }
            let device = PairedDevice(device: newDevice, owner: owner, label: authorization.deviceName, pairedAtMs: nowMs)
            _ = try await db.query(
                "INSERT INTO paired_devices (device, owner, label, paired_at) VALUES (?, ?, ?, ?)",
                [.text(device.device), .integer(Int(owner)), .text(device.label), .integer(Int(nowMs))])
            let family = newDevice + "/" + String(nowMs)
            _ = try await db.query(
                "INSERT INTO refresh_families (id, device, created_at) VALUES (?, ?, ?)",
                [.text(family), .text(device.device), .integer(Int(nowMs))])
            _ = try await db.query(
                "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (?, ?, ?, ?)",
                [.text(refreshTokenHash), .text(family), .integer(Int(nowMs)), .integer(Int(refreshExpiresAtMs))])
            return .paired(device)
        }
    }

    public func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp {
        try await transaction { db in
            let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs) { return .limited(waitSeconds: wait) }
            if let row = try await db.query("SELECT * FROM device_authorizations WHERE user_code = ?", [.text(userCode)]).first,
                let authorization = Self.authorization(row), authorization.state == .pending, !authorization.isExpired(nowMs: nowMs)
            {
                let lookedUpBy = row.column("looked_up_by")?.integer.map(Int64.init)
                if lookedUpBy == nil || lookedUpBy == owner {
                    // Only the owner who saw this page first may decide the code.
                    _ = try await db.query(
                        "UPDATE device_authorizations SET looked_up_by = ? WHERE user_code = ?",
                        [.integer(Int(owner)), .text(userCode)])
                    return .pending(deviceName: authorization.deviceName, secondsLeft: authorization.secondsLeft(nowMs: nowMs))
                }
                // Another account typed a code someone already looked up: a guess against it.
                let (wrong, locked) = CodeDecision.guessed(wrong: row.column("wrong_decisions")?.integer ?? 0, pending: true)
                _ = try await db.query(
                    "UPDATE device_authorizations SET wrong_decisions = ?, state = ? WHERE user_code = ?",
                    [.integer(wrong), .text(locked ? "denied" : "pending"), .text(userCode)])
            }
            try await Self.count(db, throttles.map(\.key), nowMs: nowMs)
            return .wrong
        }
    }

    public func decide(
        userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision {
        try await transaction { db in
            let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs) { return .limited(waitSeconds: wait) }
            guard let row = try await db.query("SELECT * FROM device_authorizations WHERE user_code = ?", [.text(userCode)]).first,
                var authorization = Self.authorization(row), let hash = row.column("device_code_hash")?.string
            else {
                try await Self.count(db, throttles.map(\.key), nowMs: nowMs)
                return .wrong
            }
            guard row.column("looked_up_by")?.integer.map(Int64.init) == owner else {
                // A decision on a code this owner never looked up: a guess against that code.
                try await Self.count(db, throttles.map(\.key), nowMs: nowMs)
                let (wrong, locked) = CodeDecision.guessed(
                    wrong: row.column("wrong_decisions")?.integer ?? 0,
                    pending: authorization.state == .pending)
                _ = try await db.query(
                    "UPDATE device_authorizations SET wrong_decisions = ?, state = ? WHERE device_code_hash = ?",
                    [.integer(wrong), .text(locked ? "denied" : Self.stateName(authorization.state)), .text(hash)])
                return locked ? .locked : .wrong
            }
            guard authorization.decide(decision, nowMs: nowMs) == .decided else { return .gone }
            var approvedBy: SQLiteData = .null
            if case .approved(let id) = authorization.state { approvedBy = .integer(Int(id)) }
            _ = try await db.query(
                "UPDATE device_authorizations SET state = ?, owner = ? WHERE device_code_hash = ?",
                [.text(Self.stateName(authorization.state)), approvedBy, .text(hash)])
            return .decided
        }
    }

    public func attempt(_ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        try await transaction { db in
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs) { return wait }
            try await Self.count(db, throttles.map(\.key), nowMs: nowMs)
            return nil
        }
    }

    public func forgive(_ keys: [String], atMs: Int64) async throws {
        try await transaction { db in
            for key in keys {
                // One row: another try counted in the same millisecond stays counted.
                _ = try await db.query(
                    "DELETE FROM code_entry_failures WHERE rowid = (SELECT rowid FROM code_entry_failures WHERE key = ? AND at = ? LIMIT 1)",
                    [.text(key), .integer(Int(atMs))])
            }
        }
    }

    /// How long until a try is let through, if any key of `throttles` is over its limit now.
    private static func limited(_ db: SQLiteConnection, _ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        _ = try await db.query("DELETE FROM code_entry_failures WHERE at <= ?", [.integer(Int(nowMs - CodeEntryLimiter.longestWindowMs))])
        for throttle in throttles {
            let tries = try await db.query("SELECT at FROM code_entry_failures WHERE key = ?", [.text(throttle.key)])
                .compactMap { $0.column("at")?.integer.map(Int64.init) }
            if case .wait(let seconds) = throttle.limiter.verdict(failures: tries, nowMs: nowMs) { return seconds }
        }
        return nil
    }

    private static func count(_ db: SQLiteConnection, _ keys: [String], nowMs: Int64) async throws {
        for key in keys {
            _ = try await db.query("INSERT INTO code_entry_failures (key, at) VALUES (?, ?)", [.text(key), .integer(Int(nowMs))])
        }
    }

    public func refresh(
        tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult {
        try await transaction { db in
            guard
                let row = try await db.query(
                    """
                    SELECT t.family, t.spent_at, t.successor, t.expires_at, f.revoked_at, f.device,
                        (SELECT s.spent_at FROM refresh_tokens s WHERE s.hash = t.successor) AS successor_spent,
                        d.owner, d.label, d.paired_at, d.unpaired_at
                    FROM refresh_tokens t JOIN refresh_families f ON f.id = t.family
                    LEFT JOIN paired_devices d ON d.device = f.device
                    WHERE t.hash = ?
                    """, [.text(tokenHash)]
                ).first,
                let family = row.column("family")?.string, let device = row.column("device")?.string
            else { return .refused }
            let isPaired = row.column("owner")?.integer != nil && row.column("unpaired_at")?.integer == nil
            let paired = PairedDevice(
                device: device, owner: Int64(row.column("owner")?.integer ?? 0), label: row.column("label")?.string ?? "",
                pairedAtMs: Int64(row.column("paired_at")?.integer ?? 0))
            let presented = RefreshTokenRules.Presented(
                familyRevoked: row.column("revoked_at")?.integer != nil || !isPaired,
                spentAtMs: row.column("spent_at")?.integer.map(Int64.init),
                successorUsed: row.column("successor_spent")?.integer != nil,
                expiresAtMs: Int64(row.column("expires_at")?.integer ?? 0))
            switch rules.judge(presented, nowMs: nowMs) {
            case .refuse:
                return .refused
            case .reuse:
                try await Self.revoke(db, family: family, device: device, nowMs: nowMs)
                return .reused(device: device)
            case .rotate:
                _ = try await db.query(
                    "UPDATE refresh_tokens SET spent_at = ?, successor = ? WHERE hash = ?",
                    [.integer(Int(nowMs)), .text(newTokenHash), .text(tokenHash)])
            case .retry:
                // The same successor as the first time, or it is a copy that diverged: reuse.
                guard row.column("successor")?.string == newTokenHash else {
                    try await Self.revoke(db, family: family, device: device, nowMs: nowMs)
                    return .reused(device: device)
                }
                return .rotated(paired)
            }
            _ = try await db.query(
                "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (?, ?, ?, ?)",
                [.text(newTokenHash), .text(family), .integer(Int(nowMs)), .integer(Int(expiresAtMs))])
            return .rotated(paired)
        }
    }

    /// Reuse seen: the family's tokens are refused, and the car is unpaired, so its access
    /// tokens (the car's and the copy's) are refused at every instance too (``UnpairWatch``) and
    /// its owner no longer sees it as paired.
    private static func revoke(_ db: SQLiteConnection, family: String, device: String, nowMs: Int64) async throws {
        _ = try await db.query("UPDATE refresh_families SET revoked_at = ? WHERE id = ?", [.integer(Int(nowMs)), .text(family)])
        _ = try await db.query(
            "UPDATE paired_devices SET unpaired_at = ? WHERE device = ? AND unpaired_at IS NULL",
            [.integer(Int(nowMs)), .text(device)])
    }

    public func pairedDevice(_ device: String) async throws -> PairedDevice? {
        try await read { db in
            try await db.query(
                "SELECT device, owner, label, paired_at FROM paired_devices WHERE device = ? AND unpaired_at IS NULL", [.text(device)]
            ).first.map {
                PairedDevice(
                    device: $0.column("device")?.string ?? "", owner: Int64($0.column("owner")?.integer ?? 0),
                    label: $0.column("label")?.string ?? "", pairedAtMs: Int64($0.column("paired_at")?.integer ?? 0))
            }
        }
    }

    public func addOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64 {
        try await transaction { db in
            let rows = try await db.query(
                "INSERT INTO owners (email, display_name, created_at) VALUES (?, ?, ?) RETURNING id",
                [.text(email), .text(displayName), .integer(Int(nowMs))])
            guard let id = rows.first?.column("id")?.integer else { throw LedgerError.unavailable("owner \(email) was not added") }
            return Int64(id)
        }
    }

    public func owner(id: Int64) async throws -> Owner? {
        try await read { db in
            try await db.query("SELECT id, email, display_name FROM owners WHERE id = ?", [.integer(Int(id))]).first.map {
                Owner(
                    id: Int64($0.column("id")?.integer ?? 0), email: $0.column("email")?.string ?? "",
                    displayName: $0.column("display_name")?.string ?? "")
            }
        }
    }

    // MARK: - Rows

    private static func stateName(_ state: DeviceAuthorization.State) -> String {
        switch state {
        case .pending: "pending"
        case .approved: "approved"
        case .denied: "denied"
        case .redeemed: "redeemed"
        }
    }

    private static func authorization(_ row: SQLiteRow) -> DeviceAuthorization? {
        let state: DeviceAuthorization.State
        switch row.column("state")?.string {
        case "pending": state = .pending
        case "approved":
            guard let owner = row.column("owner")?.integer else { return nil }
            state = .approved(owner: Int64(owner))
        case "denied": state = .denied
        case "redeemed": state = .redeemed
        default: return nil
        }
        guard let issued = row.column("issued_at")?.integer, let expires = row.column("expires_at")?.integer,
            let interval = row.column("interval_s")?.integer, let name = row.column("device_name")?.string
        else { return nil }
        return DeviceAuthorization(
            state: state, issuedAtMs: Int64(issued), expiresAtMs: Int64(expires), intervalSeconds: interval,
            lastPolledAtMs: row.column("last_polled_at")?.integer.map(Int64.init), deviceName: name)
    }

    // MARK: - Transactions

    /// Runs `body` in one `BEGIN IMMEDIATE … COMMIT` (`BEGIN` for a read), after every
    /// transaction that came before it on this connection; any error rolls it back. The whole of
    /// it runs ``uninterrupted(_:)``: a caller cancelled half way (a session that ended) waits for
    /// its end instead of leaving the transaction open with the file's write lock.
    func transaction<T: Sendable>(read: Bool = false, _ body: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        try await uninterrupted { [self] in
            await turns.take()
            do {
                try await begin(read ? "BEGIN" : "BEGIN IMMEDIATE")
                do {
                    let result = try await body(connection)
                    _ = try await connection.query("COMMIT")
                    await turns.give()
                    return result
                } catch {
                    _ = try? await connection.query("ROLLBACK")
                    throw error
                }
            } catch {
                await turns.give()
                throw error
            }
        }
    }

    /// A read outside any write: one transaction of its own, so it sees no half-made change.
    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) async throws -> T) async throws -> T {
        try await transaction(read: true, body)
    }

    /// Starts a transaction. A connection still inside one (whatever left it there) is rolled back
    /// and logged first: otherwise every later transaction fails, and the open one keeps the
    /// file's write lock from every other connection and process.
    private func begin(_ statement: String) async throws {
        do {
            _ = try await connection.query(statement)
        } catch let error as SQLiteError where error.message.contains("within a transaction") {
            logger.error(
                "the pairing store's connection was still inside a transaction: rolled back before its next use",
                metadata: ["ledger": "\(path)"])
            _ = try await connection.query("ROLLBACK")
            _ = try await connection.query(statement)
        }
    }
}

/// One at a time, first come first served: an async lock for a connection's transactions (an
/// actor alone would let a second transaction in at the first one's `await`).
actor Turns {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func take() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func give() {
        if waiting.isEmpty {
            busy = false
        } else {
            waiting.removeFirst().resume()
        }
    }
}

/// Too many codes are waiting to be typed: ask again later.
public struct PairingFull: Error {}
