import Foundation
public import Hummingbird
import Logging
import PostgresNIO
import ServiceLifecycle

/// Pairings, owners, web sessions and purchases in the fleet's PostgreSQL ledger, the same rules
/// as ``SQLitePairingStore``: one transaction per step, rows locked (`FOR UPDATE`) where two
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

    private static func state(_ state: DeviceAuthorization.State) -> (String, Int64?) {
        switch state {
        case .pending: ("pending", nil)
        case .approved(let owner): ("approved", owner)
        case .denied: ("denied", nil)
        case .redeemed: ("redeemed", nil)
        }
    }

    private func authorization(where column: String, is value: String, on db: PostgresConnection)
        async throws -> (hash: String, authorization: DeviceAuthorization)?
    {
        let query: PostgresQuery =
            column == "user_code"
            ? "SELECT device_code_hash, state, owner, issued_at, expires_at, interval_s, last_polled_at, device_name FROM device_authorizations WHERE user_code = \(value) FOR UPDATE"
            : "SELECT device_code_hash, state, owner, issued_at, expires_at, interval_s, last_polled_at, device_name FROM device_authorizations WHERE device_code_hash = \(value) FOR UPDATE"
        let rows = try await db.query(query, logger: logger)
        for try await (hash, state, owner, issued, expires, interval, polled, name)
            in rows.decode((String, String, Int64?, Int64, Int64, Int64, Int64?, String).self)
        {
            let decoded: DeviceAuthorization.State
            switch state {
            case "pending": decoded = .pending
            case "approved": guard let owner else { return nil }; decoded = .approved(owner: owner)
            case "denied": decoded = .denied
            case "redeemed": decoded = .redeemed
            default: return nil
            }
            return (
                hash,
                DeviceAuthorization(
                    state: decoded, issuedAtMs: issued, expiresAtMs: expires, intervalSeconds: Int(interval),
                    lastPolledAtMs: polled, deviceName: name)
            )
        }
        return nil
    }

    // MARK: - PairingStore

    public func startAuthorization(
        deviceCodeHash: String, deviceName: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newUserCode: @escaping @Sendable () -> String
    ) async throws -> (userCode: String, authorization: DeviceAuthorization) {
        let authorization = DeviceAuthorization(deviceName: deviceName, nowMs: nowMs, settings: settings)
        let logger = self.logger
        return try await transaction { db in
            try await db.query("DELETE FROM device_authorizations WHERE expires_at <= \(nowMs)", logger: logger)
            var live: Int64 = 0
            for try await count in try await db.query("SELECT count(*) FROM device_authorizations", logger: logger).decode(Int64.self) {
                live = count
            }
            guard live < SQLitePairingStore.maxLiveAuthorizations else { throw PairingFull() }
            for _ in 0..<16 {
                let userCode = newUserCode()
                var stored = false
                for try await _ in try await db.query(
                    """
                    INSERT INTO device_authorizations (device_code_hash, user_code, device_name, state, owner, issued_at, expires_at, interval_s)
                    VALUES (\(deviceCodeHash), \(userCode), \(deviceName), 'pending', NULL, \(authorization.issuedAtMs), \(authorization.expiresAtMs),
                            \(Int64(authorization.intervalSeconds)))
                    ON CONFLICT (user_code) DO NOTHING RETURNING 1
                    """, logger: logger
                ).decode(Int32.self) { stored = true }
                if stored { return (userCode, authorization) }
            }
            throw LedgerError.unavailable("no free user code after 16 tries")
        }
    }

    public func poll(
        deviceCodeHash: String, nowMs: Int64, settings: DeviceAuthorization.Settings,
        newDevice: String, refreshTokenHash: String, refreshExpiresAtMs: Int64
    ) async throws -> PairingPoll {
        let logger = self.logger
        return try await transaction { [self] db in
            guard var found = try await authorization(where: "device_code_hash", is: deviceCodeHash, on: db)?.authorization else {
                return .unknown
            }
            let outcome = found.poll(nowMs: nowMs, settings: settings)
            let (state, owner) = Self.state(found.state)
            try await db.query(
                """
                UPDATE device_authorizations SET state = \(state), owner = COALESCE(\(owner), owner), interval_s = \(Int64(found.intervalSeconds)),
                    last_polled_at = \(found.lastPolledAtMs) WHERE device_code_hash = \(deviceCodeHash)
                """, logger: logger)
            guard case .issue(let ownerID) = outcome else { return .outcome(outcome) }
            let device = PairedDevice(device: newDevice, owner: ownerID, label: found.deviceName, pairedAtMs: nowMs)
            let family = newDevice + "/" + String(nowMs)
            try await db.query(
                "INSERT INTO paired_devices (device, owner, label, paired_at) VALUES (\(newDevice), \(ownerID), \(device.label), \(nowMs))",
                logger: logger)
            try await db.query(
                "INSERT INTO refresh_families (id, device, created_at) VALUES (\(family), \(newDevice), \(nowMs))", logger: logger)
            try await db.query(
                "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (\(refreshTokenHash), \(family), \(nowMs), \(refreshExpiresAtMs))",
                logger: logger)
            return .paired(device)
        }
    }

    public func lookUp(userCode: String, owner: Int64, address: String, nowMs: Int64) async throws -> CodeLookUp {
        let logger = self.logger
        return try await transaction { [self] db in
            let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs, logger: logger) { return .limited(waitSeconds: wait) }
            if let found = try await authorization(where: "user_code", is: userCode, on: db)?.authorization,
                found.state == .pending, !found.isExpired(nowMs: nowMs)
            {
                var lookedUpBy: Int64?, wrong: Int64 = 0
                for try await (by, count) in try await db.query(
                    "SELECT looked_up_by, wrong_decisions FROM device_authorizations WHERE user_code = \(userCode)", logger: logger
                ).decode((Int64?, Int64).self) { (lookedUpBy, wrong) = (by, count) }
                if lookedUpBy == nil || lookedUpBy == owner {
                    // Only the owner who saw this page first may decide the code.
                    try await db.query(
                        "UPDATE device_authorizations SET looked_up_by = \(owner) WHERE user_code = \(userCode)", logger: logger)
                    return .pending(deviceName: found.deviceName, secondsLeft: found.secondsLeft(nowMs: nowMs))
                }
                // Another account typed a code someone already looked up: a guess against it.
                let (guesses, locked) = CodeDecision.guessed(wrong: Int(wrong), pending: true)
                let state = locked ? "denied" : "pending"
                try await db.query(
                    "UPDATE device_authorizations SET wrong_decisions = \(Int64(guesses)), state = \(state) WHERE user_code = \(userCode)",
                    logger: logger)
            }
            try await Self.count(db, throttles.map(\.key), nowMs: nowMs, logger: logger)
            return .wrong
        }
    }

    public func decide(
        userCode: String, decision: DeviceAuthorization.Decision, owner: Int64, address: String,
        nowMs: Int64
    ) async throws -> CodeDecision {
        let logger = self.logger
        return try await transaction { [self] db in
            let throttles = CodeEntryLimiter.pairing(owner: owner, address: address)
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs, logger: logger) { return .limited(waitSeconds: wait) }
            guard case (let hash, var found)? = try await authorization(where: "user_code", is: userCode, on: db) else {
                try await Self.count(db, throttles.map(\.key), nowMs: nowMs, logger: logger)
                return .wrong
            }
            var lookedUpBy: Int64?, wrong: Int64 = 0
            for try await (by, count) in try await db.query(
                "SELECT looked_up_by, wrong_decisions FROM device_authorizations WHERE device_code_hash = \(hash)", logger: logger
            ).decode((Int64?, Int64).self) { (lookedUpBy, wrong) = (by, count) }
            guard lookedUpBy == owner else {
                // A decision on a code this owner never looked up: a guess against that code.
                try await Self.count(db, throttles.map(\.key), nowMs: nowMs, logger: logger)
                let (guesses, locked) = CodeDecision.guessed(wrong: Int(wrong), pending: found.state == .pending)
                let state = locked ? "denied" : Self.state(found.state).0
                try await db.query(
                    "UPDATE device_authorizations SET wrong_decisions = \(Int64(guesses)), state = \(state) WHERE device_code_hash = \(hash)",
                    logger: logger)
                return locked ? .locked : .wrong
            }
            guard found.decide(decision, nowMs: nowMs) == .decided else { return .gone }
            let (state, approvedBy) = Self.state(found.state)
            try await db.query(
                "UPDATE device_authorizations SET state = \(state), owner = \(approvedBy) WHERE device_code_hash = \(hash)",
                logger: logger)
            return .decided
        }
    }

    public func attempt(_ throttles: [Throttle], nowMs: Int64) async throws -> Int? {
        let logger = self.logger
        return try await transaction { db in
            if let wait = try await Self.limited(db, throttles, nowMs: nowMs, logger: logger) { return wait }
            try await Self.count(db, throttles.map(\.key), nowMs: nowMs, logger: logger)
            return nil
        }
    }

    public func forgive(_ keys: [String], atMs: Int64) async throws {
        let logger = self.logger
        try await transaction { db in
            for key in keys {
                // One row: another try counted in the same millisecond stays counted.
                try await db.query(
                    "DELETE FROM code_entry_failures WHERE ctid = (SELECT ctid FROM code_entry_failures WHERE key = \(key) AND at = \(atMs) LIMIT 1)",
                    logger: logger)
            }
        }
    }

    /// How long until a try is let through, if any key of `throttles` is over its limit now.
    private static func limited(_ db: PostgresConnection, _ throttles: [Throttle], nowMs: Int64, logger: Logger) async throws -> Int? {
        // Tries against one key are counted one transaction at a time, at every instance: a burst
        // cannot all read the count before any of them adds to it.
        try await db.query("SELECT pg_advisory_xact_lock(hashtext(\(throttles.first?.key ?? "")))", logger: logger)
        try await db.query("DELETE FROM code_entry_failures WHERE at <= \(nowMs - CodeEntryLimiter.longestWindowMs)", logger: logger)
        for throttle in throttles {
            var tries: [Int64] = []
            for try await at in try await db.query("SELECT at FROM code_entry_failures WHERE key = \(throttle.key)", logger: logger)
                .decode(Int64.self)
            { tries.append(at) }
            if case .wait(let seconds) = throttle.limiter.verdict(failures: tries, nowMs: nowMs) { return seconds }
        }
        return nil
    }

    private static func count(_ db: PostgresConnection, _ keys: [String], nowMs: Int64, logger: Logger) async throws {
        for key in keys { try await db.query("INSERT INTO code_entry_failures (key, at) VALUES (\(key), \(nowMs))", logger: logger) }
    }

    public func refresh(
        tokenHash: String, newTokenHash: String, nowMs: Int64, expiresAtMs: Int64,
        rules: RefreshTokenRules
    ) async throws -> RefreshResult {
        let logger = self.logger
        return try await transaction { db in
            let rows = try await db.query(
                """
                SELECT t.family, t.spent_at, t.successor, t.expires_at, f.revoked_at, f.device,
                    (SELECT s.spent_at FROM refresh_tokens s WHERE s.hash = t.successor), d.owner, d.label, d.paired_at, d.unpaired_at
                FROM refresh_tokens t JOIN refresh_families f ON f.id = t.family LEFT JOIN paired_devices d ON d.device = f.device
                WHERE t.hash = \(tokenHash) FOR UPDATE OF t, f
                """, logger: logger)
            var found: (String, Int64?, String?, Int64, Int64?, String, Int64?, Int64?, String?, Int64?, Int64?)?
            for try await row in rows.decode((String, Int64?, String?, Int64, Int64?, String, Int64?, Int64?, String?, Int64?, Int64?).self)
            {
                found = row
            }
            guard let (family, spentAt, successor, expires, revoked, device, successorSpent, owner, label, pairedAt, unpaired) = found
            else { return .refused }
            let presented = RefreshTokenRules.Presented(
                familyRevoked: revoked != nil || owner == nil || unpaired != nil, spentAtMs: spentAt,
                successorUsed: successorSpent != nil, expiresAtMs: expires)
            switch rules.judge(presented, nowMs: nowMs) {
            case .refuse:
                return .refused
            case .reuse:
                try await Self.revoke(db, family: family, device: device, nowMs: nowMs, logger: logger)
                return .reused(device: device)
            case .rotate:
                try await db.query(
                    "UPDATE refresh_tokens SET spent_at = \(nowMs), successor = \(newTokenHash) WHERE hash = \(tokenHash)", logger: logger)
            case .retry:
                // The same successor as the first time, or it is a copy that diverged: reuse.
                guard successor == newTokenHash else {
                    try await Self.revoke(db, family: family, device: device, nowMs: nowMs, logger: logger)
                    return .reused(device: device)
                }
                return .rotated(PairedDevice(device: device, owner: owner ?? 0, label: label ?? "", pairedAtMs: pairedAt ?? 0))
            }
            try await db.query(
                "INSERT INTO refresh_tokens (hash, family, issued_at, expires_at) VALUES (\(newTokenHash), \(family), \(nowMs), \(expiresAtMs))",
                logger: logger)
            return .rotated(PairedDevice(device: device, owner: owner ?? 0, label: label ?? "", pairedAtMs: pairedAt ?? 0))
        }
    }

    /// Reuse seen: the family's tokens are refused, and the car is unpaired (as in SQLite's store).
    private static func revoke(_ db: PostgresConnection, family: String, device: String, nowMs: Int64, logger: Logger) async throws {
        try await db.query("UPDATE refresh_families SET revoked_at = \(nowMs) WHERE id = \(family)", logger: logger)
        try await db.query(
            "UPDATE paired_devices SET unpaired_at = \(nowMs) WHERE device = \(device) AND unpaired_at IS NULL", logger: logger)
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
