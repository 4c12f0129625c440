import Foundation
public import Hummingbird
import SQLiteNIO
import NIOFoundationCompat
import ServiceLifecycle

/// Hummingbird's key-value store for the owners' web sessions (`HummingbirdAuth`'s
/// `SessionStorage`), in the ledger's SQLite file: a session made at one instance is known at the
/// next one, and survives a restart. Values are JSON; an expired row reads as absent and is
/// deleted when next written or read. Keys are stored hashed (``WebSessionRows/storedKey(_:)``):
/// the database never holds a cookie that would sign someone in.
public struct SQLiteSessionDriver: PersistDriver {
    let store: SQLitePairingStore

    public init(store: SQLitePairingStore) { self.store = store }

    public func run() async throws { try await gracefulShutdown() }

    public func create<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        let (stored, owner, now) = (WebSessionRows.storedKey(key), WebSessionRows.owner(data), Self.nowMs())
        let created = try await store.transaction { db in
            _ = try await db.query("DELETE FROM web_sessions WHERE key = ? AND expires_at <= ?", [.text(stored), .integer(now)])
            return
                !(try await db.query(
                    "INSERT INTO web_sessions (key, value, expires_at, owner) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING key",
                    [.text(stored), .blob(ByteBuffer(data: data)), Self.expiry(expires), owner.map { .integer(Int($0)) } ?? .null]
                ).isEmpty)
        }
        guard created else { throw PersistError.duplicate }
    }

    public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        let (stored, owner) = (WebSessionRows.storedKey(key), WebSessionRows.owner(data))
        _ = try await store.transaction { db in
            try await db.query(
                """
                INSERT INTO web_sessions (key, value, expires_at, owner) VALUES (?, ?, ?, ?)
                ON CONFLICT (key) DO UPDATE SET value = excluded.value, owner = excluded.owner,
                    expires_at = COALESCE(excluded.expires_at, web_sessions.expires_at)
                """, [.text(stored), .blob(ByteBuffer(data: data)), Self.expiry(expires), owner.map { .integer(Int($0)) } ?? .null])
        }
    }

    public func get<Object: Codable & Sendable>(key: String, as type: Object.Type) async throws -> Object? {
        let (stored, now) = (WebSessionRows.storedKey(key), Self.nowMs())
        let found = try await store.read { db -> Data? in
            guard
                let row = try await db.query(
                    "SELECT value FROM web_sessions WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
                    [.text(stored), .integer(now)]
                ).first, case .blob(let buffer)? = row.column("value")
            else { return nil }
            return Data(buffer: buffer)
        }
        return try found.map { try JSONDecoder().decode(type, from: $0) }
    }

    public func remove(key: String) async throws {
        let stored = WebSessionRows.storedKey(key)
        _ = try await store.transaction { db in try await db.query("DELETE FROM web_sessions WHERE key = ?", [.text(stored)]) }
    }

    static func nowMs() -> Int { Int(Date().timeIntervalSince1970 * 1000) }

    /// When a value stored now with `expires` runs out, in milliseconds since the Unix epoch;
    /// `nil`: never (both session drivers).
    static func expiresAtMs(_ expires: Duration?) -> Int64? {
        guard let expires else { return nil }
        let (seconds, attoseconds) = expires.components
        return Int64(nowMs()) + Int64(clamping: seconds) * 1000 + attoseconds / 1_000_000_000_000_000
    }

    static func expiry(_ expires: Duration?) -> SQLiteData { expiresAtMs(expires).map { .integer(Int($0)) } ?? .null }
}

/// How both session drivers store a web session's row.
enum WebSessionRows {
    /// The key as stored: its SHA-256. The cookie holds the key's random part; a copy of the
    /// database (a backup, a replica) holds nothing a browser could present.
    static func storedKey(_ key: String) -> String { "sha256:" + PairingEndpoints.hash(key) }

    /// The owner a session value belongs to (a ``WebSession``), so that a password reset can end
    /// all of theirs and the owner can list them.
    static func owner(_ value: Data) -> Int64? {
        struct Owned: Decodable { let owner: Int64 }
        return (try? JSONDecoder().decode(Owned.self, from: value))?.owner
    }
}
