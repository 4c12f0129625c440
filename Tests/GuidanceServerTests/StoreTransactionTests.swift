import Foundation
@testable import GuidanceServer
import InMemoryLogging
import Logging
import SQLiteNIO
import Testing

/// A transaction is one unit that a cancelled caller cannot cut in half: a WebSocket session that
/// ends cancels its tasks, possibly while one of them is inside a transaction. Before, the next
/// statement and the `ROLLBACK` were dropped for the cancelled task, `BEGIN IMMEDIATE` was never
/// closed, and the connection kept the file's write lock until a restart.
@Suite struct StoreTransactionTests {
    static func withFile(_ body: (String) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try await body(folder.appendingPathComponent("usage.sqlite").path)
    }

    /// Whether another connection can take the file's write lock now, without waiting.
    static func writeLockIsFree(_ path: String) async throws -> Bool {
        let other = try await SQLiteLedger.connect(path: path, logger: Logger(label: "other"))
        defer { Task { try? await other.close() } }
        _ = try await other.query("PRAGMA busy_timeout = 0")
        do {
            _ = try await other.query("BEGIN IMMEDIATE")
            _ = try await other.query("ROLLBACK")
            return true
        } catch {
            return false
        }
    }

    @Test func aCancelledCallerCannotCutATransactionInHalf() async throws {
        try await Self.withFile { path in
            let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing"))
            let (inside, entered) = AsyncStream<Void>.makeStream()
            let (release, released) = AsyncStream<Void>.makeStream()
            let caller = Task {
                try await store.transaction { db in
                    _ = try await db.query("INSERT INTO owners (email, display_name, created_at) VALUES ('a@example.org', 'A', 1)")
                    entered.yield()
                    for await _ in release { break }
                    // The caller has been cancelled by now: this statement and the COMMIT still run.
                    _ = try await db.query("INSERT INTO owners (email, display_name, created_at) VALUES ('b@example.org', 'B', 2)")
                    return 2
                }
            }
            for await _ in inside { break }
            caller.cancel()
            released.yield()
            #expect(try await caller.value == 2)
            // Both rows or none: here both, committed.
            #expect(try await store.account(email: "a@example.org") != nil)
            #expect(try await store.account(email: "b@example.org") != nil)
            #expect(try await Self.writeLockIsFree(path), "the cancelled transaction still holds the write lock")
            // The store goes on.
            #expect(try await store.createOwner(email: "c@example.org", displayName: "C", nowMs: 3) != nil)
            try await store.shutdown()
        }
    }

    @Test func aCancelledCallersFailingTransactionIsRolledBackWhole() async throws {
        try await Self.withFile { path in
            let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing"))
            struct Failed: Error {}
            let caller = Task {
                try await store.transaction { db -> Int in
                    _ = try await db.query("INSERT INTO owners (email, display_name, created_at) VALUES ('a@example.org', 'A', 1)")
                    withUnsafeCurrentTask { $0?.cancel() }
                    throw Failed()
                }
            }
            caller.cancel()
            await #expect(throws: Failed.self) { try await caller.value }
            #expect(try await store.account(email: "a@example.org") == nil)
            #expect(try await Self.writeLockIsFree(path))
            try await store.shutdown()
        }
    }

    /// A connection found still inside a transaction (whatever left it there) is rolled back and
    /// logged before its next use, instead of every later transaction failing.
    @Test func aConnectionLeftInsideATransactionIsRolledBackAndLoggedBeforeItsNextUse() async throws {
        try await Self.withFile { path in
            let log = InMemoryLogHandler()
            let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing") { _ in log })
            _ = try await store.connection.query("BEGIN IMMEDIATE")
            _ = try await store.connection.query("INSERT INTO owners (email, display_name, created_at) VALUES ('half@example.org', 'H', 1)")
            #expect(try await store.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: 2) != nil)
            #expect(try await store.account(email: "half@example.org") == nil, "the half-made change was rolled back")
            #expect(log.entries.contains { $0.level == .error && "\($0.message)".contains("inside a transaction") }, "\(log.entries)")
            #expect(try await Self.writeLockIsFree(path))
            try await store.shutdown()
        }
    }

    /// A charge whose caller was cancelled is written whole (not dropped with the others in its
    /// group): a segment re-sent later finds it charged.
    @Test func aCancelledCallersChargeIsWrittenWhole() async throws {
        try await Self.withFile { path in
            let ledger = try await SQLiteLedger.open(path: path, logger: Logger(label: "ledger"))
            let charge = UsageCharge(device: "car-1", stream: "s", seq: 1, sha256: String(repeating: "a", count: 64), seconds: 5)
            let caller = Task { try await ledger.charge(charge) }
            caller.cancel()
            let result = try await caller.value
            #expect(result == .charged(DeviceBalance(device: "car-1", creditedSeconds: 0, spentSeconds: 5, segments: 1)), "\(result)")
            #expect(try await ledger.balance(device: "car-1").spentSeconds == 5)
            try await ledger.shutdown()
        }
    }
}
