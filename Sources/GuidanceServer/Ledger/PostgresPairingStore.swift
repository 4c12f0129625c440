import Foundation
public import Hummingbird
import Logging
import PostgresNIO
import ServiceLifecycle

/// Pairings, owners, web sessions and purchases in the fleet's PostgreSQL ledger. Pairing's steps
/// are ``SQLitePairingStore``'s (``PairingSteps``), on statements of this dialect
/// (``PostgresPairingStatements``): one transaction per step, rows locked (`FOR UPDATE`) where two
/// instances could act on the same authorization, token or payment at once. Its tables are made
/// with the ledger's (``PostgresSchema``), in the same transaction under the same advisory lock.
public final class PostgresPairingStore: PairingStore, OwnerStore {
    let client: PostgresClient
    let schema: PostgresSchema
    let logger: Logger

    /// On the ledger's client (which must be running) and schema.
    public init(ledger: PostgresLedger) {
        client = ledger.client
        schema = ledger.schema
        logger = ledger.logger
    }

    /// The client belongs to the ledger, which closes it.
    public func shutdown() async throws {}

    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await schema.ensure()
        return try await PostgresUnit.transaction(client, logger: logger, body)
    }

    // MARK: - PairingStore

    public func startAuthorization(
        deviceCodeHash: String, deviceName: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newUserCode: @escaping @Sendable () -> String
    ) async throws -> (userCode: String, authorization: DeviceAuthorization) {
        try await transaction { [logger] db in
            try await PairingSteps.startAuthorization(
                PostgresPairingStatements(db: db, logger: logger), deviceCodeHash: deviceCodeHash, deviceName: deviceName, nowMs: nowMs,
                settings: settings, newUserCode: newUserCode)
        }
    }

    public func poll(
        deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll {
        try await transaction { [logger] db in
            try await PairingSteps.poll(
                PostgresPairingStatements(db: db, logger: logger), deviceCodeHash: deviceCodeHash, nowMs: nowMs, settings: settings,
                newDevice: newDevice, refreshTokenHash: refreshTokenHash, refreshExpiresAtMs: refreshExpiresAtMs)
        }
    }

    public func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp {
        try await transaction { [logger] db in
            try await PairingSteps.lookUp(
                PostgresPairingStatements(db: db, logger: logger), userCode: userCode, owner: owner, address: address, nowMs: nowMs)
        }
    }

    public func decide(
        userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision {
        try await transaction { [logger] db in
            try await PairingSteps.decide(
                PostgresPairingStatements(db: db, logger: logger), userCode: userCode, decision: decision, owner: owner, address: address,
                nowMs: nowMs)
        }
    }

    public func attempt(_ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        try await transaction { [logger] db in
            try await PairingSteps.attempt(PostgresPairingStatements(db: db, logger: logger), throttles, nowMs: nowMs)
        }
    }

    public func forgive(_ keys: [String], atMs: Int64) async throws {
        try await transaction { [logger] db in
            try await PairingSteps.forgive(PostgresPairingStatements(db: db, logger: logger), keys, atMs: atMs)
        }
    }

    public func refresh(
        tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult {
        try await transaction { [logger] db in
            try await PairingSteps.refresh(
                PostgresPairingStatements(db: db, logger: logger), tokenHash: tokenHash, newTokenHash: newTokenHash, nowMs: nowMs,
                expiresAtMs: expiresAtMs, rules: rules)
        }
    }

    public func pairedDevice(_ device: String) async throws -> PairedDevice? {
        try await schema.ensure()
        let rows = try await client.query(
            "SELECT device, owner, label, paired_at FROM paired_devices WHERE device = \(device) AND unpaired_at IS NULL", logger: logger)
        for try await (device, owner, label, pairedAt) in rows.decode((String, Int64, String, Int64).self) {
            return PairedDevice(device: device, owner: owner, label: label, pairedAtMs: pairedAt)
        }
        return nil
    }

    public func addOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64 {
        guard let id = try await createOwner(email: email, displayName: displayName, nowMs: nowMs) else {
            throw LedgerError.invalid("\(email) has an account already")
        }
        return id
    }

    public func owner(id: Int64) async throws -> Owner? {
        try await schema.ensure()
        for try await (id, email, name) in try await client.query(
            "SELECT id, email, display_name FROM owners WHERE id = \(id)", logger: logger
        ).decode((Int64, String, String).self) {
            return Owner(id: id, email: email, displayName: name)
        }
        return nil
    }

    // MARK: - OwnerStore

    public func createOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64? {
        let logger = self.logger
        return try await transaction { db in
            for try await id in try await db.query(
                "INSERT INTO owners (email, display_name, created_at) VALUES (\(email), \(displayName), \(nowMs)) ON CONFLICT (email) DO NOTHING RETURNING id",
                logger: logger
            ).decode(Int64.self) { return id }
            return nil
        }
    }

    public func addPasswordLink(owner: Int64, tokenHash: String, expiresAtMs: Int64) async throws {
        let logger = self.logger
        _ = try await transaction { db in
            try await db.query(
                "INSERT INTO password_links (token_hash, owner, expires_at) VALUES (\(tokenHash), \(owner), \(expiresAtMs))",
                logger: logger)
        }
    }

    public func preferences(owner: Int64) async throws -> OwnerPreferences {
        try await schema.ensure()
        for try await (zone, language, impactMail) in try await client.query(
            "SELECT time_zone, language, impact_mail FROM owners WHERE id = \(owner)", logger: logger
        ).decode((String?, String?, Bool).self) { return OwnerPreferences(timeZone: zone, language: language, impactMail: impactMail) }
        return OwnerPreferences()
    }

    public func setPreferences(owner: Int64, _ preferences: OwnerPreferences) async throws {
        let logger = self.logger
        _ = try await transaction { db in
            try await db.query(
                "UPDATE owners SET time_zone = \(preferences.timeZone), language = \(preferences.language), impact_mail = \(preferences.impactMail) WHERE id = \(owner)",
                logger: logger)
        }
    }

    public func passwordLinkOwner(tokenHash: String, nowMs: Int64) async throws -> Int64? {
        try await schema.ensure()
        for try await owner in try await client.query(
            "SELECT owner FROM password_links WHERE token_hash = \(tokenHash) AND used_at IS NULL AND expires_at > \(nowMs)", logger: logger
        ).decode(Int64.self) { return owner }
        return nil
    }

    public func usePasswordLink(tokenHash: String, passwordHash: String, nowMs: Int64) async throws -> Int64? {
        let logger = self.logger
        return try await transaction { db in
            var owner: Int64?
            for try await id in try await db.query(
                """
                UPDATE password_links SET used_at = \(nowMs) WHERE token_hash = \(tokenHash) AND used_at IS NULL AND expires_at > \(nowMs)
                RETURNING owner
                """, logger: logger
            ).decode(Int64.self) { owner = id }
            guard let owner else { return nil }
            try await db.query("UPDATE owners SET password_hash = \(passwordHash) WHERE id = \(owner)", logger: logger)
            // A new password ends everything the old one (or a leaked link) could still do.
            try await db.query("UPDATE password_links SET used_at = \(nowMs) WHERE owner = \(owner) AND used_at IS NULL", logger: logger)
            try await db.query("DELETE FROM web_sessions WHERE owner = \(owner)", logger: logger)
            return owner
        }
    }

    public func webSessions(owner: Int64, nowMs: Int64) async throws -> [StoredWebSession] {
        try await schema.ensure()
        var found: [StoredWebSession] = []
        for try await (id, value, expires) in try await client.query(
            "SELECT key, value, expires_at FROM web_sessions WHERE owner = \(owner) AND (expires_at IS NULL OR expires_at > \(nowMs))",
            logger: logger
        ).decode((String, String, Int64?).self) {
            found.append(StoredWebSession(id: id, value: Data(value.utf8), expiresAtMs: expires))
        }
        return found
    }

    public func endWebSession(owner: Int64, id: String) async throws -> Bool {
        let logger = self.logger
        return try await transaction { db in
            var ended = false
            for try await _ in try await db.query(
                "DELETE FROM web_sessions WHERE owner = \(owner) AND key = \(id) RETURNING 1", logger: logger
            )
            .decode(Int32.self) { ended = true }
            return ended
        }
    }

    public func passwordHash(owner: Int64) async throws -> String? {
        try await schema.ensure()
        for try await hash in try await client.query("SELECT password_hash FROM owners WHERE id = \(owner)", logger: logger)
            .decode(String?.self)
        { return hash }
        return nil
    }

    public func account(email: String) async throws -> (owner: Owner, passwordHash: String?)? {
        try await schema.ensure()
        for try await (id, email, name, hash) in try await client.query(
            "SELECT id, email, display_name, password_hash FROM owners WHERE email = \(email)", logger: logger
        ).decode((Int64, String, String, String?).self) {
            return (Owner(id: id, email: email, displayName: name), hash)
        }
        return nil
    }

    public func devices(owner: Int64) async throws -> [OwnedDevice] {
        try await schema.ensure()
        var cars: [OwnedDevice] = []
        for try await (device, label, pairedAt, lastSeen) in try await client.query(
            "SELECT device, label, paired_at, last_seen_at FROM paired_devices WHERE owner = \(owner) AND unpaired_at IS NULL ORDER BY paired_at, device",
            logger: logger
        ).decode((String, String, Int64, Int64?).self) {
            cars.append(OwnedDevice(device: device, label: label, pairedAtMs: pairedAt, lastSeenAtMs: lastSeen, recentGuidance: []))
        }
        for index in cars.indices {
            for try await (at, text) in try await client.query(
                "SELECT at, text FROM device_guidance WHERE device = \(cars[index].device) ORDER BY at DESC LIMIT \(Int64(OwnedDevice.recentGuidanceCount))",
                logger: logger
            ).decode((Int64, String).self) {
                cars[index].recentGuidance.append((at, text))
            }
        }
        return cars
    }

    public func rename(device: String, owner: Int64, label: String) async throws -> Bool {
        let logger = self.logger
        return try await transaction { db in
            var renamed = false
            for try await _ in try await db.query(
                "UPDATE paired_devices SET label = \(label) WHERE device = \(device) AND owner = \(owner) AND unpaired_at IS NULL RETURNING 1",
                logger: logger
            ).decode(Int32.self) { renamed = true }
            return renamed
        }
    }

    public func unpair(device: String, owner: Int64, nowMs: Int64) async throws -> Bool {
        let logger = self.logger
        return try await transaction { db in
            var done = false
            for try await _ in try await db.query(
                "UPDATE paired_devices SET unpaired_at = \(nowMs) WHERE device = \(device) AND owner = \(owner) AND unpaired_at IS NULL RETURNING 1",
                logger: logger
            ).decode(Int32.self) { done = true }
            guard done else { return false }
            try await db.query(
                "UPDATE refresh_families SET revoked_at = \(nowMs) WHERE device = \(device) AND revoked_at IS NULL", logger: logger)
            // Its drives were this owner's: the car's next owner starts with none.
            try await db.query("DELETE FROM device_trips WHERE device = \(device)", logger: logger)
            try await db.query("DELETE FROM device_track WHERE device = \(device)", logger: logger)
            return true
        }
    }

    public func unpaired(sinceMs: Int64) async throws -> [(device: String, atMs: Int64)] {
        try await schema.ensure()
        var found: [(device: String, atMs: Int64)] = []
        for try await (device, at) in try await client.query(
            "SELECT device, unpaired_at FROM paired_devices WHERE unpaired_at >= \(sinceMs)", logger: logger
        ).decode((String, Int64).self) {
            found.append((device, at))
        }
        return found
    }

    public func seen(device: String, nowMs: Int64) async throws {
        let logger = self.logger
        _ = try await transaction { db in
            try await db.query("UPDATE paired_devices SET last_seen_at = \(nowMs) WHERE device = \(device)", logger: logger)
        }
    }

    public func recordGuidance(device: String, text: String, nowMs: Int64) async throws {
        let logger = self.logger
        try await transaction { db in
            try await db.query(
                "INSERT INTO device_guidance (device, at, text) VALUES (\(device), \(nowMs), \(String(text.prefix(500))))", logger: logger)
            try await db.query(
                """
                DELETE FROM device_guidance WHERE device = \(device) AND ctid NOT IN
                    (SELECT ctid FROM device_guidance WHERE device = \(device) ORDER BY at DESC LIMIT \(Int64(OwnedDevice.recentGuidanceCount)))
                """, logger: logger)
        }
    }

    public func startPayment(_ payment: Payment) async throws {
        let logger = self.logger
        _ = try await transaction { db in
            try await db.query(
                """
                INSERT INTO payments (provider, payment_id, owner, device, product, seconds, price, status, created_at)
                VALUES (\(payment.provider), \(payment.id), \(payment.owner), \(payment.device), \(payment.product), \(Int64(payment.seconds)),
                        \(payment.price), 'pending', \(payment.createdAtMs))
                """, logger: logger)
        }
    }

    public func payment(provider: String, id: String) async throws -> Payment? {
        try await schema.ensure()
        for try await (owner, device, product, seconds, price, status, created) in try await client.query(
            "SELECT owner, device, product, seconds, price, status, created_at FROM payments WHERE provider = \(provider) AND payment_id = \(id)",
            logger: logger
        ).decode((Int64, String, String, Int64, String, String, Int64).self) {
            return Payment(
                provider: provider, id: id, owner: owner, device: device, product: product, seconds: Int(seconds), price: price,
                status: Payment.Status(rawValue: status) ?? .pending, createdAtMs: created)
        }
        return nil
    }

    public func settlePayment(provider: String, id: String, paid: Bool, nowMs: Int64) async throws -> Bool {
        let logger = self.logger
        return try await transaction { db in
            // The row is locked by the UPDATE: a second instance with the same webhook waits, then
            // finds it settled and changes nothing.
            var settled: (String, Int64)?
            for try await row in try await db.query(
                """
                UPDATE payments SET status = \(paid ? "paid" : "declined"), settled_at = \(nowMs)
                WHERE provider = \(provider) AND payment_id = \(id) AND status = 'pending' RETURNING device, seconds
                """, logger: logger
            ).decode((String, Int64).self) { settled = row }
            guard paid, let (device, seconds) = settled, seconds > 0 else { return false }
            try await db.query(
                "INSERT INTO credits (device, seconds, note) VALUES (\(device), \(seconds), \("payment \(provider) \(id)"))", logger: logger
            )
            try await db.query(
                """
                INSERT INTO balances (device, credited) VALUES (\(device), \(seconds))
                ON CONFLICT (device) DO UPDATE SET credited = balances.credited + EXCLUDED.credited
                """, logger: logger)
            return true
        }
    }
}

/// The owners' web sessions in PostgreSQL, for HummingbirdAuth's session storage.
public struct PostgresSessionDriver: PersistDriver {
    let store: PostgresPairingStore

    public init(store: PostgresPairingStore) { self.store = store }

    public func run() async throws { try await gracefulShutdown() }

    public func create<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        let (text, stored, owner) = (String(decoding: data, as: UTF8.self), WebSessionRows.storedKey(key), WebSessionRows.owner(data))
        let (now, until) = (Int64(SQLiteSessionDriver.nowMs()), SQLiteSessionDriver.expiresAtMs(expires))
        let logger = store.logger
        try await store.schema.ensure()
        let created = try await PostgresUnit.transaction(store.client, logger: logger) { db in
            try await db.query("DELETE FROM web_sessions WHERE key = \(stored) AND expires_at <= \(now)", logger: logger)
            var made = false
            for try await _ in try await db.query(
                "INSERT INTO web_sessions (key, value, expires_at, owner) VALUES (\(stored), \(text), \(until), \(owner)) ON CONFLICT (key) DO NOTHING RETURNING 1",
                logger: logger
            ).decode(Int32.self) { made = true }
            return made
        }
        guard created else { throw PersistError.duplicate }
    }

    public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        let (text, stored, owner) = (String(decoding: data, as: UTF8.self), WebSessionRows.storedKey(key), WebSessionRows.owner(data))
        let until = SQLiteSessionDriver.expiresAtMs(expires)
        try await store.schema.ensure()
        try await store.client.query(
            """
            INSERT INTO web_sessions (key, value, expires_at, owner) VALUES (\(stored), \(text), \(until), \(owner))
            ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, owner = EXCLUDED.owner,
                expires_at = COALESCE(EXCLUDED.expires_at, web_sessions.expires_at)
            """, logger: store.logger)
    }

    public func get<Object: Codable & Sendable>(key: String, as type: Object.Type) async throws -> Object? {
        let (now, stored) = (Int64(SQLiteSessionDriver.nowMs()), WebSessionRows.storedKey(key))
        try await store.schema.ensure()
        for try await text in try await store.client.query(
            "SELECT value FROM web_sessions WHERE key = \(stored) AND (expires_at IS NULL OR expires_at > \(now))", logger: store.logger
        ).decode(String.self) {
            return try JSONDecoder().decode(type, from: Data(text.utf8))
        }
        return nil
    }

    public func remove(key: String) async throws {
        try await store.client.query("DELETE FROM web_sessions WHERE key = \(WebSessionRows.storedKey(key))", logger: store.logger)
    }

}

/// Pairing's statements in PostgreSQL's dialect, on one connection inside one transaction. Rows
/// two instances could act on at once are locked (`FOR UPDATE`), and the code-entry counts of
/// each key are taken one transaction at a time (an advisory lock on each key).
struct PostgresPairingStatements: PairingStatements {
    let db: PostgresConnection
    let logger: Logger

    func deleteExpiredAuthorizations(nowMs: Int64) async throws {
        try await db.query("DELETE FROM device_authorizations WHERE expires_at <= \(nowMs)", logger: logger)
    }

    func liveAuthorizations() async throws -> Int {
        var live: Int64 = 0
        for try await count in try await db.query("SELECT count(*) FROM device_authorizations", logger: logger).decode(Int64.self) {
            live = count
        }
        return Int(live)
    }

    func insertAuthorization(deviceCodeHash: String, userCode: String, _ authorization: DeviceAuthorization) async throws -> Bool {
        var stored = false
        for try await _ in try await db.query(
            """
            INSERT INTO device_authorizations (device_code_hash, user_code, device_name, state, owner, issued_at, expires_at, interval_s)
            VALUES (\(deviceCodeHash), \(userCode), \(authorization.deviceName), 'pending', NULL, \(authorization.issuedAtMs),
                    \(authorization.expiresAtMs), \(Int64(authorization.intervalSeconds)))
            ON CONFLICT (user_code) DO NOTHING RETURNING 1
            """, logger: logger
        ).decode(Int32.self) { stored = true }
        return stored
    }

    func authorization(_ key: AuthorizationKey) async throws -> StoredAuthorization? {
        let query: PostgresQuery =
            switch key {
            case .userCode(let code):
                """
                SELECT device_code_hash, state, owner, issued_at, expires_at, interval_s, last_polled_at, device_name, looked_up_by,
                    wrong_decisions FROM device_authorizations WHERE user_code = \(code) FOR UPDATE
                """
            case .deviceCodeHash(let hash):
                """
                SELECT device_code_hash, state, owner, issued_at, expires_at, interval_s, last_polled_at, device_name, looked_up_by,
                    wrong_decisions FROM device_authorizations WHERE device_code_hash = \(hash) FOR UPDATE
                """
            }
        let rows = try await db.query(query, logger: logger)
        for try await (hash, name, owner, issued, expires, interval, polled, deviceName, lookedUpBy, wrong)
            in rows.decode((String, String, Int64?, Int64, Int64, Int64, Int64?, String, Int64?, Int64).self)
        {
            guard let state = PairingSteps.state(named: name, owner: owner) else { return nil }
            return StoredAuthorization(
                deviceCodeHash: hash,
                authorization: DeviceAuthorization(
                    state: state, issuedAtMs: issued, expiresAtMs: expires, intervalSeconds: Int(interval), lastPolledAtMs: polled,
                    deviceName: deviceName),
                lookedUpBy: lookedUpBy, wrongDecisions: Int(wrong))
        }
        return nil
    }

    func savePoll(deviceCodeHash: String, _ authorization: DeviceAuthorization) async throws {
        try await db.query(
            """
            UPDATE device_authorizations SET state = \(PairingSteps.stateName(authorization.state)),
                interval_s = \(Int64(authorization.intervalSeconds)), last_polled_at = \(authorization.lastPolledAtMs)
                WHERE device_code_hash = \(deviceCodeHash)
            """, logger: logger)
    }

    func saveDecision(deviceCodeHash: String, _ state: DeviceAuthorization.State) async throws {
        try await db.query(
            """
            UPDATE device_authorizations SET state = \(PairingSteps.stateName(state)), owner = \(PairingSteps.owner(of: state))
                WHERE device_code_hash = \(deviceCodeHash)
            """, logger: logger)
    }

    func saveLookUp(deviceCodeHash: String, by owner: Int64) async throws {
        try await db.query(
            "UPDATE device_authorizations SET looked_up_by = \(owner) WHERE device_code_hash = \(deviceCodeHash)", logger: logger)
    }

    func saveGuesses(deviceCodeHash: String, wrong: Int, _ state: DeviceAuthorization.State) async throws {
        try await db.query(
            """
            UPDATE device_authorizations SET wrong_decisions = \(Int64(wrong)), state = \(PairingSteps.stateName(state))
                WHERE device_code_hash = \(deviceCodeHash)
            """, logger: logger)
    }

    func insertPairing(_ device: PairedDevice, family: String, refreshTokenHash: String, refreshExpiresAtMs: Int64) async throws {
        try await db.query(
            """
            INSERT INTO paired_devices (device, owner, label, paired_at)
                VALUES (\(device.device), \(device.owner), \(device.label), \(device.pairedAtMs))
            """, logger: logger)
        try await db.query(
            "INSERT INTO refresh_families (id, device, created_at) VALUES (\(family), \(device.device), \(device.pairedAtMs))",
            logger: logger)
        try await db.query(
            """
            INSERT INTO refresh_tokens (hash, family, issued_at, expires_at)
                VALUES (\(refreshTokenHash), \(family), \(device.pairedAtMs), \(refreshExpiresAtMs))
            """, logger: logger)
    }

    /// Tries against one key are counted one transaction at a time, at every instance: an advisory
    /// lock on each key's hash, taken in the order of the hashes, so two transactions that share
    /// keys take them in the same order and cannot wait on each other.
    func holdCodeEntries(keys: [String]) async throws {
        var hashes: [Int64] = []
        for try await hash in try await db.query(
            "SELECT DISTINCT hashtext(key)::bigint AS h FROM unnest(\(keys)::text[]) AS key ORDER BY h", logger: logger
        ).decode(Int64.self) { hashes.append(hash) }
        for hash in hashes { try await db.query("SELECT pg_advisory_xact_lock(\(hash))", logger: logger) }
    }

    func deleteCodeEntryFailures(atOrBeforeMs: Int64) async throws {
        try await db.query("DELETE FROM code_entry_failures WHERE at <= \(atOrBeforeMs)", logger: logger)
    }

    func codeEntryFailures(key: String) async throws -> [Int64] {
        var tries: [Int64] = []
        for try await at in try await db.query("SELECT at FROM code_entry_failures WHERE key = \(key)", logger: logger).decode(Int64.self) {
            tries.append(at)
        }
        return tries
    }

    func addCodeEntryFailure(key: String, atMs: Int64) async throws {
        try await db.query("INSERT INTO code_entry_failures (key, at) VALUES (\(key), \(atMs))", logger: logger)
    }

    func forgiveCodeEntryFailure(key: String, atMs: Int64) async throws {
        try await db.query(
            "DELETE FROM code_entry_failures WHERE ctid = (SELECT ctid FROM code_entry_failures WHERE key = \(key) AND at = \(atMs) LIMIT 1)",
            logger: logger)
    }

    func refreshToken(hash: String) async throws -> StoredRefreshToken? {
        let rows = try await db.query(
            """
            SELECT t.family, t.spent_at, t.successor, t.expires_at, f.revoked_at, f.device,
                (SELECT s.spent_at FROM refresh_tokens s WHERE s.hash = t.successor), d.owner, d.label, d.paired_at, d.unpaired_at
            FROM refresh_tokens t JOIN refresh_families f ON f.id = t.family LEFT JOIN paired_devices d ON d.device = f.device
            WHERE t.hash = \(hash) FOR UPDATE OF t, f
            """, logger: logger)
        for try await (family, spentAt, successor, expires, revoked, device, successorSpent, owner, label, pairedAt, unpaired)
            in rows.decode((String, Int64?, String?, Int64, Int64?, String, Int64?, Int64?, String?, Int64?, Int64?).self)
        {
            return StoredRefreshToken(
                family: family, successor: successor,
                presented: RefreshTokenRules.Presented(
                    familyRevoked: revoked != nil || owner == nil || unpaired != nil, spentAtMs: spentAt,
                    successorUsed: successorSpent != nil, expiresAtMs: expires),
                device: PairedDevice(device: device, owner: owner ?? 0, label: label ?? "", pairedAtMs: pairedAt ?? 0))
        }
        return nil
    }

    func spendRefreshToken(hash: String, successor: String, nowMs: Int64) async throws {
        try await db.query("UPDATE refresh_tokens SET spent_at = \(nowMs), successor = \(successor) WHERE hash = \(hash)", logger: logger)
    }

    func insertRefreshToken(hash: String, family: String, issuedAtMs: Int64, expiresAtMs: Int64) async throws {
        try await db.query(
            "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (\(hash), \(family), \(issuedAtMs), \(expiresAtMs))",
            logger: logger)
    }

    /// Reuse seen: the family's tokens are refused, and the car is unpaired (as in SQLite's store).
    func revoke(family: String, device: String, nowMs: Int64) async throws {
        try await db.query("UPDATE refresh_families SET revoked_at = \(nowMs) WHERE id = \(family)", logger: logger)
        try await db.query(
            "UPDATE paired_devices SET unpaired_at = \(nowMs) WHERE device = \(device) AND unpaired_at IS NULL", logger: logger)
    }
}
