import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Logging
import Testing
import TestSupport

/// The usage ledger on its own, the same tests on SQLite and on a real PostgreSQL server, then
/// under the server killed with -9.
@Suite struct LedgerTests {
    static let logger = Logger(label: "ledger-test")
    static func sha(_ text: String) -> String { sha256Hex(Data(text.utf8)) }

    static func folder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Where a test's ledger lives: an SQLite file in a temporary folder, or a new database on the
    /// test process's PostgreSQL server. Each ``use`` opens it anew, as a restarted server would.
    enum Backend: String, CaseIterable, Sendable, CustomStringConvertible {
        case sqlite, postgres
        var description: String { rawValue }
    }

    struct Store: Sendable {
        let backend: Backend
        let location: String

        init(_ backend: Backend) async throws {
            self.backend = backend
            switch backend {
            case .sqlite: location = try LedgerTests.folder().appendingPathComponent("usage.sqlite").path
            case .postgres: location = try await PostgresServer.shared().createDatabase()
            }
        }

        /// Opens the ledger, runs `body` with it, closes it.
        func use<T: Sendable>(_ body: @Sendable (any UsageLedger) async throws -> T) async throws -> T {
            switch backend {
            case .sqlite:
                let ledger = try await SQLiteLedger.open(path: location, logger: LedgerTests.logger)
                let result = try await body(ledger)
                try await ledger.shutdown()
                return result
            case .postgres:
                let store = try PostgresStore(url: location, logger: LedgerTests.logger)
                return try await withServices(store.services) { try await body(store.ledger) }
            }
        }

        /// One SQL query through a client nobody here wrote: sqlite3 or psql; its output, trimmed.
        func sql(_ query: String) async throws -> String {
            let result =
                switch backend {
                case .sqlite: try await Command.executeAsync("/usr/bin/sqlite3", [location, query])
                case .postgres: try await PostgresServer.shared().psql(database: String(location.split(separator: "/").last ?? ""), query)
                }
            guard result.status == 0 else { throw PostgresServer.Failure(description: "\(query): \(result.stderr)") }
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    @Test(arguments: Backend.allCases)
    func aSegmentIsChargedOnceAndCreditsAddUpAcrossAReopen(_ backend: Backend) async throws {
        let store = try await Store(backend)
        try await store.use { (ledger: any UsageLedger) async throws in
            let first = UsageCharge(device: "car-1", stream: "s1", seq: 0, sha256: Self.sha("a"), seconds: 5)
            #expect(try await ledger.charge(first) == .charged(.init(device: "car-1", spentSeconds: 5, segments: 1)))
            // The same key again: nothing changes, and the digest first charged is told.
            var again = first
            again.sha256 = Self.sha("b")
            #expect(
                try await ledger.charge(again)
                    == .alreadyCharged(.init(device: "car-1", spentSeconds: 5, segments: 1), sha256: Self.sha("a")))
            #expect(
                try await ledger.charge(UsageCharge(device: "car-1", stream: "s2", seq: 0, sha256: Self.sha("c"), seconds: 4))
                    == .charged(.init(device: "car-1", spentSeconds: 9, segments: 2)))
            _ = try await ledger.credit(device: "car-1", seconds: 100, note: "order 1")
            #expect(try await ledger.credit(device: "car-2", seconds: 7, note: "") == .init(device: "car-2", creditedSeconds: 7))
        }
        try await store.use { (reopened: any UsageLedger) async throws in
            #expect(
                try await reopened.balances() == [
                    .init(device: "car-1", creditedSeconds: 100, spentSeconds: 9, segments: 2), .init(device: "car-2", creditedSeconds: 7)
                ])
            #expect(try await reopened.balance(device: "car-1").remaining(allowance: 0) == 91)
            #expect(try await reopened.balance(device: "car-1").remaining(allowance: nil) == nil)
            #expect(try await reopened.balance(device: "nobody") == .init(device: "nobody"))
        }
        // The store's own client reads the same numbers, and every event is there.
        #expect(try await store.sql("SELECT spent || '|' || segments || '|' || credited FROM balances WHERE device = 'car-1'") == "9|2|100")
        #expect(try await store.sql("SELECT count(*) || '|' || sum(seconds) FROM usage_events WHERE device = 'car-1'") == "2|9")
    }

    @Test(arguments: Backend.allCases)
    func concurrentChargesOfOneSegmentChargeItOnce(_ backend: Backend) async throws {
        let store = try await Store(backend)
        let results = try await store.use { (ledger: any UsageLedger) async throws in
            let charge = UsageCharge(device: "car-1", stream: "s1", seq: 7, sha256: Self.sha("x"), seconds: 5)
            return try await withThrowingTaskGroup(of: ChargeResult.self) { group in
                for _ in 0..<50 { group.addTask { try await ledger.charge(charge) } }
                return try await group.reduce(into: [ChargeResult]()) { $0.append($1) }
            }
        }
        #expect(results.filter { if case .charged = $0 { true } else { false } }.count == 1)
        #expect(try await store.sql("SELECT spent || '|' || segments FROM balances WHERE device = 'car-1'") == "5|1")
    }

    @Test(arguments: Backend.allCases)
    func valuesNoDeviceCouldSendAreRefused(_ backend: Backend) async throws {
        try await Store(backend).use { (ledger: any UsageLedger) async throws in
            for charge in [
                UsageCharge(device: "", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: 1),
                UsageCharge(device: "d", stream: "s", seq: -1, sha256: Self.sha("a"), seconds: 1),
                UsageCharge(device: "d", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: -5),
                UsageCharge(device: "d", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: .max),
                UsageCharge(device: "d", stream: "s", seq: 0, sha256: "short", seconds: 1)
            ] {
                await #expect(throws: LedgerError.self) { try await ledger.charge(charge) }
            }
            await #expect(throws: LedgerError.self) { try await ledger.credit(device: "d", seconds: 0, note: "") }
            await #expect(throws: LedgerError.self) { try await ledger.credit(device: "d", seconds: .max, note: "") }
            #expect(try await ledger.balances().isEmpty)
        }
        // Sums that could overflow saturate instead.
        #expect(DeviceBalance(device: "d", creditedSeconds: .max, spentSeconds: 0).remaining(allowance: .max) == .max)
        #expect(DeviceBalance(device: "d", creditedSeconds: 0, spentSeconds: .max).remaining(allowance: .min) == 0)
    }

    /// A hosted model's tokens are kept per segment, once, and add up per device on both stores.
    @Test(arguments: Backend.allCases)
    func modelTokensAreRecordedOncePerSegment(_ backend: Backend) async throws {
        let store = try await Store(backend)
        try await store.use { (ledger: any UsageLedger) async throws in
            let usage = ModelUsage(device: "car-1", stream: "s1", seq: 3, model: "gemini-2.5-flash", inputTokens: 1290, outputTokens: 31)
            try await ledger.recordModelUsage(usage)
            try await ledger.recordModelUsage(usage)
            var next = usage
            next.seq = 4
            next.outputTokens = 9
            try await ledger.recordModelUsage(next)
            await #expect(throws: LedgerError.self) {
                try await ledger.recordModelUsage(
                    .init(device: "car-1", stream: "s1", seq: 5, model: "m", inputTokens: -1, outputTokens: 0))
            }
        }
        try await store.use { (reopened: any UsageLedger) async throws in
            let balance = try await reopened.balance(device: "car-1")
            #expect(balance.inputTokens == 2580 && balance.outputTokens == 40)
        }
        #expect(try await store.sql("SELECT count(*) || '|' || sum(input_tokens) FROM model_usage WHERE device = 'car-1'") == "2|2580")
    }

    /// A ledger file made before token totals existed (schema 1) is brought up to date (schema 3)
    /// when the server opens it, and keeps every balance.
    @Test func aSchemaOneSQLiteLedgerIsUpgradedInPlace() async throws {
        let file = try Self.folder().appendingPathComponent("old.sqlite").path
        let old = """
            CREATE TABLE usage_events (device TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL, sha256 TEXT NOT NULL,
                seconds INTEGER NOT NULL CHECK (seconds >= 0), at TEXT NOT NULL, PRIMARY KEY (device, stream, seq));
            CREATE TABLE credits (id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL, seconds INTEGER NOT NULL CHECK (seconds > 0),
                note TEXT NOT NULL, at TEXT NOT NULL);
            CREATE TABLE balances (device TEXT PRIMARY KEY, credited INTEGER NOT NULL DEFAULT 0, spent INTEGER NOT NULL DEFAULT 0,
                segments INTEGER NOT NULL DEFAULT 0);
            INSERT INTO balances VALUES ('car-1', 100, 15, 3);
            PRAGMA user_version = 1;
            """
        let made = try await Command.executeAsync("/usr/bin/sqlite3", [file, old])
        try #require(made.status == 0, "\(made.stderr)")
        let ledger = try await SQLiteLedger.open(path: file, logger: Self.logger)
        #expect(try await ledger.balance(device: "car-1") == .init(device: "car-1", creditedSeconds: 100, spentSeconds: 15, segments: 3))
        try await ledger.recordModelUsage(.init(device: "car-1", stream: "s", seq: 0, model: "m", inputTokens: 10, outputTokens: 2))
        #expect(try await ledger.balance(device: "car-1").inputTokens == 10)
        try await ledger.shutdown()
        let version = try await Command.executeAsync("/usr/bin/sqlite3", [file, "PRAGMA user_version"])
        #expect(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4")
        // Schema 3's pairing tables (and schema 4's columns) came with the same upgrade.
        let tables = try await Command.executeAsync(
            "/usr/bin/sqlite3", [file, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"])
        for table in ["code_entry_failures", "device_authorizations", "owners", "paired_devices", "refresh_families", "refresh_tokens"] {
            #expect(tables.stdout.split(separator: "\n").contains(Substring(table)), "\(table)")
        }
    }

    @Test func aBadLedgerValueIsAConfigErrorExit78() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        try ServerProcess.write(folder, "server.yaml", "ledger: mysql://nope\n")
        let server = Spawned.buildFolder.appendingPathComponent("guidance-server").path
        let result = try await Command.executeAsync(server, ["usage", "--config", folder.appendingPathComponent("server.yaml").path])
        #expect(result.status == 78, "\(result.stderr)")
        #expect(result.stderr.contains("ledger: 'mysql://nope' is not allowed"), "\(result.stderr)")
    }

    /// The server killed with -9 while a device streams: after a restart, the device's balance is
    /// what was acknowledged before the kill, as `guidance-server usage --json` reads it, and the
    /// segments re-sent to the new server are acknowledged without being charged again.
    @Test func theBalanceSurvivesKill9AndARestart() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let extra = "usage:\n  remainingSeconds: 1000\nledger: sqlite:\(folder.appendingPathComponent("usage.sqlite").path)"
        var server: ServerProcess? = try await ServerProcess(extra: extra, folder: folder)
        let data = await SampleSegment.clip(4)
        let header: @Sendable (Int) -> String = { seq in
            ServerHardeningTests.header(seq: seq, durationMs: 5000, bytes: data.count, chunks: 1, sha: ServerHardeningTests.sha(data))
        }
        let hello = ClientMessage.hello(
            .init(
                device: "car-1", locale: "en-US", agent: "test",
                video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000), stream: "run-1")
        ).encoded()
        let port = try #require(server?.port)
        let acked = try await ServerHardeningTests.offPool { () -> [String] in
            let client = try RawClient(port: port)
            _ = try client.upgrade(token: "good-token")
            try client.sendText(hello)
            _ = try client.readTexts(until: "welcome")
            for seq in 0..<6 {
                try client.sendText(header(seq))
                try client.sendFrame(.binary, data)
            }
            return try client.readTexts(until: #""usage","remainingSeconds":970"#)
        }
        #expect(acked.contains { $0.contains("970") }, "\(acked)")
        server?.process.stop(SIGKILL)
        server = nil

        let usage = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("guidance-server").path,
            ["usage", "car-1", "--json", "--config", folder.appendingPathComponent("server.yaml").path])
        #expect(usage.status == 0, "\(usage.stderr)")
        #expect(usage.stdout.contains(#""remainingSeconds":970"#) && usage.stdout.contains(#""segments":6"#), "\(usage.stdout)")

        // The agent re-sends two it never saw acknowledged, and one new.
        let restarted = try await ServerProcess(extra: extra, folder: folder)
        let after = try await ServerHardeningTests.offPool { () -> [String] in
            let client = try RawClient(port: restarted.port)
            _ = try client.upgrade(token: "good-token")
            try client.sendText(hello)
            var texts = try client.readTexts(until: "welcome")
            for seq in [4, 5, 6] {
                try client.sendText(header(seq))
                try client.sendFrame(.binary, data)
            }
            texts += try client.readTexts(until: #""usage""#)
            return texts
        }
        #expect(after.first?.contains(#""remainingSeconds":970"#) == true, "the restarted server forgot: \(after)")
        #expect(after.contains(#"{"seq":4,"type":"ack"}"#) || after.contains { $0.contains(#""ack""#) && $0.contains(#""seq":4"#) })
        #expect(after.last?.contains(#""remainingSeconds":965"#) == true, "only segment 6 is charged: \(after)")
        #expect(!after.contains { $0.contains(#""guidance""#) && ($0.contains(#""seq":4"#) || $0.contains(#""seq":5"#)) })
    }
}
