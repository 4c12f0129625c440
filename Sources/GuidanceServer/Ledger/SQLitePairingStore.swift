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
/// `guidance-server owner add`) waits its turn instead of failing half way. Each step is
/// ``PairingSteps``, on ``SQLitePairingStatements``.
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
        try await transaction { db in
            try await PairingSteps.startAuthorization(
                SQLitePairingStatements(db: db), deviceCodeHash: deviceCodeHash, deviceName: deviceName, nowMs: nowMs,
                settings: settings, newUserCode: newUserCode)
        }
    }

    public func poll(
        deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll {
        try await transaction { db in
            try await PairingSteps.poll(
                SQLitePairingStatements(db: db), deviceCodeHash: deviceCodeHash, nowMs: nowMs, settings: settings,
                newDevice: newDevice, refreshTokenHash: refreshTokenHash, refreshExpiresAtMs: refreshExpiresAtMs)
        }
    }

    public func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp {
        try await transaction { db in
            try await PairingSteps.lookUp(SQLitePairingStatements(db: db), userCode: userCode, owner: owner, address: address, nowMs: nowMs)
        }
    }

    public func decide(
        userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision {
        try await transaction { db in
            try await PairingSteps.decide(
                SQLitePairingStatements(db: db), userCode: userCode, decision: decision, owner: owner, address: address, nowMs: nowMs)
        }
    }

    public func attempt(_ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        try await transaction { db in try await PairingSteps.attempt(SQLitePairingStatements(db: db), throttles, nowMs: nowMs) }
    }

    public func forgive(_ keys: [String], atMs: Int64) async throws {
        try await transaction { db in try await PairingSteps.forgive(SQLitePairingStatements(db: db), keys, atMs: atMs) }
    }

    public func refresh(
        tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult {
        try await transaction { db in
            try await PairingSteps.refresh(
                SQLitePairingStatements(db: db), tokenHash: tokenHash, newTokenHash: newTokenHash, nowMs: nowMs,
                expiresAtMs: expiresAtMs, rules: rules)
        }
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

/// Pairing's statements in SQLite's dialect, on the store's connection inside one of its
/// transactions (which run one at a time, so nothing needs locking row by row).
struct SQLitePairingStatements: PairingStatements {
    let db: SQLiteConnection

    func deleteExpiredAuthorizations(nowMs: Int64) async throws {
        _ = try await db.query("DELETE FROM device_authorizations WHERE expires_at <= ?", [.integer(Int(nowMs))])
    }

    func liveAuthorizations() async throws -> Int {
        try await db.query("SELECT count(*) AS n FROM device_authorizations").first?.column("n")?.integer ?? 0
    }

    func insertAuthorization(deviceCodeHash: String, userCode: String, _ authorization: DeviceAuthorization) async throws -> Bool {
        let taken = try await db.query("SELECT 1 FROM device_authorizations WHERE user_code = ?", [.text(userCode)])
        guard taken.isEmpty else { return false }
        _ = try await db.query(
            """
            INSERT INTO device_authorizations (device_code_hash, user_code, device_name, state, owner, issued_at,
                expires_at, interval_s, last_polled_at) VALUES (?, ?, ?, 'pending', NULL, ?, ?, ?, NULL)
            """,
            [
                .text(deviceCodeHash), .text(userCode), .text(authorization.deviceName), .integer(Int(authorization.issuedAtMs)),
                .integer(Int(authorization.expiresAtMs)), .integer(authorization.intervalSeconds)
            ])
        return true
    }

    func authorization(_ key: AuthorizationKey) async throws -> StoredAuthorization? {
        let rows =
            switch key {
            case .deviceCodeHash(let hash):
                try await db.query("SELECT * FROM device_authorizations WHERE device_code_hash = ?", [.text(hash)])
            case .userCode(let code):
                try await db.query("SELECT * FROM device_authorizations WHERE user_code = ?", [.text(code)])
            }
        guard let row = rows.first, let hash = row.column("device_code_hash")?.string,
            let state = PairingSteps.state(named: row.column("state")?.string, owner: row.column("owner")?.integer.map(Int64.init)),
            let issued = row.column("issued_at")?.integer, let expires = row.column("expires_at")?.integer,
            let interval = row.column("interval_s")?.integer, let name = row.column("device_name")?.string
        else { return nil }
        return StoredAuthorization(
            deviceCodeHash: hash,
            authorization: DeviceAuthorization(
                state: state, issuedAtMs: Int64(issued), expiresAtMs: Int64(expires), intervalSeconds: interval,
                lastPolledAtMs: row.column("last_polled_at")?.integer.map(Int64.init), deviceName: name),
            lookedUpBy: row.column("looked_up_by")?.integer.map(Int64.init), wrongDecisions: row.column("wrong_decisions")?.integer ?? 0)
    }

    func savePoll(deviceCodeHash: String, _ authorization: DeviceAuthorization) async throws {
        _ = try await db.query(
            "UPDATE device_authorizations SET state = ?, interval_s = ?, last_polled_at = ? WHERE device_code_hash = ?",
            [
                .text(PairingSteps.stateName(authorization.state)), .integer(authorization.intervalSeconds),
                authorization.lastPolledAtMs.map { .integer(Int($0)) } ?? .null, .text(deviceCodeHash)
            ])
    }

    func saveDecision(deviceCodeHash: String, _ state: DeviceAuthorization.State) async throws {
        _ = try await db.query(
            "UPDATE device_authorizations SET state = ?, owner = ? WHERE device_code_hash = ?",
            [.text(PairingSteps.stateName(state)), PairingSteps.owner(of: state).map { .integer(Int($0)) } ?? .null, .text(deviceCodeHash)])
    }

    func saveLookUp(deviceCodeHash: String, by owner: Int64) async throws {
        _ = try await db.query(
            "UPDATE device_authorizations SET looked_up_by = ? WHERE device_code_hash = ?", [.integer(Int(owner)), .text(deviceCodeHash)])
    }

    func saveGuesses(deviceCodeHash: String, wrong: Int, _ state: DeviceAuthorization.State) async throws {
        _ = try await db.query(
            "UPDATE device_authorizations SET wrong_decisions = ?, state = ? WHERE device_code_hash = ?",
            [.integer(wrong), .text(PairingSteps.stateName(state)), .text(deviceCodeHash)])
    }

    func insertPairing(_ device: PairedDevice, family: String, refreshTokenHash: String, refreshExpiresAtMs: Int64) async throws {
        _ = try await db.query(
            "INSERT INTO paired_devices (device, owner, label, paired_at) VALUES (?, ?, ?, ?)",
            [.text(device.device), .integer(Int(device.owner)), .text(device.label), .integer(Int(device.pairedAtMs))])
        _ = try await db.query(
            "INSERT INTO refresh_families (id, device, created_at) VALUES (?, ?, ?)",
            [.text(family), .text(device.device), .integer(Int(device.pairedAtMs))])
        _ = try await db.query(
            "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (?, ?, ?, ?)",
            [.text(refreshTokenHash), .text(family), .integer(Int(device.pairedAtMs)), .integer(Int(refreshExpiresAtMs))])
    }

    /// `BEGIN IMMEDIATE` already holds the file's write lock for the whole transaction.
    func holdCodeEntries(keys: [String]) async throws {}

    func deleteCodeEntryFailures(atOrBeforeMs: Int64) async throws {
        _ = try await db.query("DELETE FROM code_entry_failures WHERE at <= ?", [.integer(Int(atOrBeforeMs))])
    }

    func codeEntryFailures(key: String) async throws -> [Int64] {
        try await db.query("SELECT at FROM code_entry_failures WHERE key = ?", [.text(key)])
            .compactMap { $0.column("at")?.integer.map(Int64.init) }
    }

    func addCodeEntryFailure(key: String, atMs: Int64) async throws {
        _ = try await db.query("INSERT INTO code_entry_failures (key, at) VALUES (?, ?)", [.text(key), .integer(Int(atMs))])
    }

    func forgiveCodeEntryFailure(key: String, atMs: Int64) async throws {
        _ = try await db.query(
            "DELETE FROM code_entry_failures WHERE rowid = (SELECT rowid FROM code_entry_failures WHERE key = ? AND at = ? LIMIT 1)",
            [.text(key), .integer(Int(atMs))])
    }

    func refreshToken(hash: String) async throws -> StoredRefreshToken? {
        guard
            let row = try await db.query(
                """
                SELECT t.family, t.spent_at, t.successor, t.expires_at, f.revoked_at, f.device,
                    (SELECT s.spent_at FROM refresh_tokens s WHERE s.hash = t.successor) AS successor_spent,
                    d.owner, d.label, d.paired_at, d.unpaired_at
                FROM refresh_tokens t JOIN refresh_families f ON f.id = t.family
                LEFT JOIN paired_devices d ON d.device = f.device
                WHERE t.hash = ?
                """, [.text(hash)]
            ).first,
            let family = row.column("family")?.string, let device = row.column("device")?.string
        else { return nil }
        let isPaired = row.column("owner")?.integer != nil && row.column("unpaired_at")?.integer == nil
        return StoredRefreshToken(
            family: family, successor: row.column("successor")?.string,
            presented: RefreshTokenRules.Presented(
                familyRevoked: row.column("revoked_at")?.integer != nil || !isPaired,
                spentAtMs: row.column("spent_at")?.integer.map(Int64.init),
                successorUsed: row.column("successor_spent")?.integer != nil,
                expiresAtMs: Int64(row.column("expires_at")?.integer ?? 0)),
            device: PairedDevice(
                device: device, owner: Int64(row.column("owner")?.integer ?? 0), label: row.column("label")?.string ?? "",
                pairedAtMs: Int64(row.column("paired_at")?.integer ?? 0)))
    }

    func spendRefreshToken(hash: String, successor: String, nowMs: Int64) async throws {
        _ = try await db.query(
            "UPDATE refresh_tokens SET spent_at = ?, successor = ? WHERE hash = ?", [.integer(Int(nowMs)), .text(successor), .text(hash)])
    }

    func insertRefreshToken(hash: String, family: String, issuedAtMs: Int64, expiresAtMs: Int64) async throws {
        _ = try await db.query(
            "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (?, ?, ?, ?)",
            [.text(hash), .text(family), .integer(Int(issuedAtMs)), .integer(Int(expiresAtMs))])
    }

    /// Reuse seen: the family's tokens are refused, and the car is unpaired, so its access
    /// tokens (the car's and the copy's) are refused at every instance too (``UnpairWatch``) and
    /// its owner no longer sees it as paired.
    func revoke(family: String, device: String, nowMs: Int64) async throws {
        _ = try await db.query("UPDATE refresh_families SET revoked_at = ? WHERE id = ?", [.integer(Int(nowMs)), .text(family)])
        _ = try await db.query(
            "UPDATE paired_devices SET unpaired_at = ? WHERE device = ? AND unpaired_at IS NULL", [.integer(Int(nowMs)), .text(device)])
    }
}
