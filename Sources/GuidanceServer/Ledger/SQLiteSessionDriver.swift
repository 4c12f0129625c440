import Foundation
public import Hummingbird
import SQLiteNIO
import NIOFoundationCompat
import ServiceLifecycle

/// Hummingbird's key-value store for the owners' web sessions (`HummingbirdAuth`'s
/// `SessionStorage`), in the ledger's SQLite file: a session made at one instance is known at the
/// next one, and survives a restart. Values are JSON; an expired row reads as absent and is
/// deleted when next written or read.
public struct SQLiteSessionDriver: PersistDriver {
    let store: SQLitePairingStore

    public init(store: SQLitePairingStore) { self.store = store }

    public func run() async throws { try await gracefulShutdown() }

    public func create<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        let created = try await store.transaction { db in
            _ = try await db.query("DELETE FROM web_sessions WHERE key = ? AND expires_at <= ?", [.text(key), .integer(Self.nowMs())])
            return !(try await db.query(
                "INSERT INTO web_sessions (key, value, expires_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING key",
                [.text(key), .blob(ByteBuffer(data: data)), Self.expiry(expires)]).isEmpty)
        }
        guard created else { throw PersistError.duplicate }
    }

    public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let data = try JSONEncoder().encode(value)
        _ = try await store.transaction { db in
            try await db.query(
                """
                INSERT INTO web_sessions (key, value, expires_at) VALUES (?, ?, ?)
                ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = COALESCE(excluded.expires_at, web_sessions.expires_at)
                """, [.text(key), .blob(ByteBuffer(data: data)), Self.expiry(expires)])
        }
    }

    public func get<Object: Codable & Sendable>(key: String, as type: Object.Type) async throws -> Object? {
        guard let row = try await store.connection.query(
            "SELECT value FROM web_sessions WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)", [.text(key), .integer(Self.nowMs())]
        ).first, case .blob(let buffer)? = row.column("value") else { return nil }
        return try JSONDecoder().decode(type, from: Data(buffer: buffer))
    }

    public func remove(key: String) async throws {
        _ = try await store.transaction { db in try await db.query("DELETE FROM web_sessions WHERE key = ?", [.text(key)]) }
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
