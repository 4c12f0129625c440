import Foundation
import SQLiteNIO
import NIOFoundationCompat

extension SQLitePairingStore: OwnerStore {
    public func createOwner(email: String, displayName: String, nowMs: Int64) async throws -> Int64? {
        try await transaction { db in
            let rows = try await db.query(
                "INSERT INTO owners (email, display_name, created_at) VALUES (?, ?, ?) ON CONFLICT (email) DO NOTHING RETURNING id",
                [.text(email), .text(displayName), .integer(Int(nowMs))])
            return rows.first?.column("id")?.integer.map(Int64.init)
        }
    }

    public func addPasswordLink(owner: Int64, tokenHash: String, expiresAtMs: Int64) async throws {
        _ = try await transaction { db in
            try await db.query(
                "INSERT INTO password_links (token_hash, owner, expires_at) VALUES (?, ?, ?)",
                [.text(tokenHash), .integer(Int(owner)), .integer(Int(expiresAtMs))])
        }
    }

    public func passwordLinkOwner(tokenHash: String, nowMs: Int64) async throws -> Int64? {
        try await read { db in
            try await db.query(
                "SELECT owner FROM password_links WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
                [.text(tokenHash), .integer(Int(nowMs))]
            ).first?.column("owner")?.integer.map(Int64.init)
        }
    }

    public func usePasswordLink(tokenHash: String, passwordHash: String, nowMs: Int64) async throws -> Int64? {
        try await transaction { db in
            guard
                let owner = try await db.query(
                    "UPDATE password_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? RETURNING owner",
                    [.integer(Int(nowMs)), .text(tokenHash), .integer(Int(nowMs))]
                ).first?.column("owner")?.integer
            else { return nil }
            _ = try await db.query("UPDATE owners SET password_hash = ? WHERE id = ?", [.text(passwordHash), .integer(owner)])
            // A new password ends everything the old one (or a leaked link) could still do.
            _ = try await db.query(
                "UPDATE password_links SET used_at = ? WHERE owner = ? AND used_at IS NULL",
                [.integer(Int(nowMs)), .integer(owner)])
            _ = try await db.query("DELETE FROM web_sessions WHERE owner = ?", [.integer(owner)])
            return Int64(owner)
        }
    }

    public func preferences(owner: Int64) async throws -> OwnerPreferences {
        try await read { db in
            let row = try await db.query("SELECT time_zone, language, impact_mail FROM owners WHERE id = ?", [.integer(Int(owner))]).first
            return OwnerPreferences(
                timeZone: row?.column("time_zone")?.string, language: row?.column("language")?.string,
                impactMail: (row?.column("impact_mail")?.integer ?? 0) != 0)
        }
    }

    public func setPreferences(owner: Int64, _ preferences: OwnerPreferences) async throws {
        _ = try await transaction { db in
            try await db.query(
                "UPDATE owners SET time_zone = ?, language = ?, impact_mail = ? WHERE id = ?",
                [
                    preferences.timeZone.map { .text($0) } ?? .null, preferences.language.map { .text($0) } ?? .null,
                    .integer(preferences.impactMail ? 1 : 0), .integer(Int(owner))
                ])
        }
    }

    public func webSessions(owner: Int64, nowMs: Int64) async throws -> [StoredWebSession] {
        try await read { db in
            try await db.query(
                "SELECT key, value, expires_at FROM web_sessions WHERE owner = ? AND (expires_at IS NULL OR expires_at > ?)",
                [.integer(Int(owner)), .integer(Int(nowMs))]
            ).compactMap { row in
                guard let id = row.column("key")?.string, case .blob(let buffer)? = row.column("value") else { return nil }
                return StoredWebSession(id: id, value: Data(buffer: buffer), expiresAtMs: row.column("expires_at")?.integer.map(Int64.init))
            }
        }
    }

    public func endWebSession(owner: Int64, id: String) async throws -> Bool {
        try await transaction { db in
            !(try await db.query("DELETE FROM web_sessions WHERE owner = ? AND key = ? RETURNING key", [.integer(Int(owner)), .text(id)])
                .isEmpty)
        }
    }

    public func passwordHash(owner: Int64) async throws -> String? {
        try await read { db in
            try await db.query("SELECT password_hash FROM owners WHERE id = ?", [.integer(Int(owner))]).first?.column("password_hash")?
                .string
        }
    }

    public func account(email: String) async throws -> (owner: Owner, passwordHash: String?)? {
        try await read { db in
            try await db.query("SELECT id, email, display_name, password_hash FROM owners WHERE email = ?", [.text(email)]).first.map {
                (
                    Owner(
                        id: Int64($0.column("id")?.integer ?? 0), email: $0.column("email")?.string ?? "",
                        displayName: $0.column("display_name")?.string ?? ""), $0.column("password_hash")?.string
                )
            }
        }
    }

    public func devices(owner: Int64) async throws -> [OwnedDevice] {
        try await read { db in
            let rows = try await db.query(
                "SELECT device, label, paired_at, last_seen_at FROM paired_devices WHERE owner = ? AND unpaired_at IS NULL ORDER BY paired_at, device",
                [.integer(Int(owner))])
            var devices: [OwnedDevice] = []
            for row in rows {
                let device = row.column("device")?.string ?? ""
                let guidance = try await db.query(
                    "SELECT at, text FROM device_guidance WHERE device = ? ORDER BY at DESC LIMIT ?",
                    [.text(device), .integer(OwnedDevice.recentGuidanceCount)]
                ).map { (atMs: Int64($0.column("at")?.integer ?? 0), text: $0.column("text")?.string ?? "") }
                devices.append(
                    OwnedDevice(
                        device: device, label: row.column("label")?.string ?? "",
                        pairedAtMs: Int64(row.column("paired_at")?.integer ?? 0),
                        lastSeenAtMs: row.column("last_seen_at")?.integer.map(Int64.init), recentGuidance: guidance))
            }
            return devices
        }
    }

    public func rename(device: String, owner: Int64, label: String) async throws -> Bool {
        try await transaction { db in
            !(try await db.query(
                "UPDATE paired_devices SET label = ? WHERE device = ? AND owner = ? AND unpaired_at IS NULL RETURNING device",
                [.text(label), .text(device), .integer(Int(owner))]
            ).isEmpty)
        }
    }

    public func unpair(device: String, owner: Int64, nowMs: Int64) async throws -> Bool {
        try await transaction { db in
            guard
                !(try await db.query(
                    "UPDATE paired_devices SET unpaired_at = ? WHERE device = ? AND owner = ? AND unpaired_at IS NULL RETURNING device",
                    [.integer(Int(nowMs)), .text(device), .integer(Int(owner))]
                ).isEmpty)
            else { return false }
            _ = try await db.query(
                "UPDATE refresh_families SET revoked_at = ? WHERE device = ? AND revoked_at IS NULL",
                [.integer(Int(nowMs)), .text(device)])
            // Its drives were this owner's: the car's next owner starts with none.
            _ = try await db.query("DELETE FROM device_trips WHERE device = ?", [.text(device)])
            _ = try await db.query("DELETE FROM device_track WHERE device = ?", [.text(device)])
            return true
        }
    }

    public func unpaired(sinceMs: Int64) async throws -> [(device: String, atMs: Int64)] {
        try await read { db in
            try await db.query("SELECT device, unpaired_at FROM paired_devices WHERE unpaired_at >= ?", [.integer(Int(sinceMs))]).map {
                (device: $0.column("device")?.string ?? "", atMs: Int64($0.column("unpaired_at")?.integer ?? 0))
            }
        }
    }

    public func seen(device: String, nowMs: Int64) async throws {
        _ = try await transaction { db in
            try await db.query("UPDATE paired_devices SET last_seen_at = ? WHERE device = ?", [.integer(Int(nowMs)), .text(device)])
        }
    }

    public func recordGuidance(device: String, text: String, nowMs: Int64) async throws {
        _ = try await transaction { db in
            _ = try await db.query(
                "INSERT INTO device_guidance (device, at, text) VALUES (?, ?, ?)",
                [.text(device), .integer(Int(nowMs)), .text(String(text.prefix(500)))])
            // Only the newest few are kept: the table never grows with a car's mileage.
            return try await db.query(
                """
                DELETE FROM device_guidance WHERE device = ? AND rowid NOT IN
                    (SELECT rowid FROM device_guidance WHERE device = ? ORDER BY at DESC LIMIT ?)
                """, [.text(device), .text(device), .integer(OwnedDevice.recentGuidanceCount)])
        }
    }

    public func startPayment(_ payment: Payment) async throws {
        _ = try await transaction { db in
            try await db.query(
                """
                INSERT INTO payments (provider, payment_id, owner, device, product, seconds, price, status, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?)
                """,
                [
                    .text(payment.provider), .text(payment.id), .integer(Int(payment.owner)), .text(payment.device), .text(payment.product),
                    .integer(payment.seconds), .text(payment.price), .integer(Int(payment.createdAtMs))
                ])
        }
    }

    public func payment(provider: String, id: String) async throws -> Payment? {
        try await read { db in
            try await db.query("SELECT * FROM payments WHERE provider = ? AND payment_id = ?", [.text(provider), .text(id)]).first.map {
                Payment(
                    provider: provider, id: id, owner: Int64($0.column("owner")?.integer ?? 0), device: $0.column("device")?.string ?? "",
                    product: $0.column("product")?.string ?? "", seconds: $0.column("seconds")?.integer ?? 0,
                    price: $0.column("price")?.string ?? "",
                    status: Payment.Status(rawValue: $0.column("status")?.string ?? "") ?? .pending,
                    createdAtMs: Int64($0.column("created_at")?.integer ?? 0))
            }
        }
    }

    public func settlePayment(provider: String, id: String, paid: Bool, nowMs: Int64) async throws -> Bool {
        try await transaction { db in
            // Only a pending payment moves, once: a repeated webhook, or the same one at a second
            // instance (waiting on the write lock), finds it settled and changes nothing.
            guard
                let row = try await db.query(
                    "UPDATE payments SET status = ?, settled_at = ? WHERE provider = ? AND payment_id = ? AND status = 'pending' RETURNING device, seconds",
                    [.text(paid ? "paid" : "declined"), .integer(Int(nowMs)), .text(provider), .text(id)]
                ).first
            else { return false }
            guard paid, let device = row.column("device")?.string, let seconds = row.column("seconds")?.integer, seconds > 0 else {
                return false
            }
            _ = try await db.query(
                "INSERT INTO credits (device, seconds, note, at) VALUES (?, ?, ?, ?)",
                [.text(device), .integer(seconds), .text("payment \(provider) \(id)"), .text(SQLiteLedger.now())])
            return true
        }
    }
}
