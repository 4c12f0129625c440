import Crypto
import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Logging
import Testing
import TestSupport

/// The usage ledger on its own (SQLite, a file in a temporary folder), then under the server
/// killed with -9.
@Suite struct LedgerTests {
    static let logger = Logger(label: "ledger-test")
    static func sha(_ text: String) -> String { SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined() }

    static func folder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    @Test func aSegmentIsChargedOnceAndCreditsAddUpAcrossAReopen() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("usage.sqlite").path
        let ledger = try await SQLiteLedger.open(path: path, logger: Self.logger)
        let first = UsageCharge(device: "car-1", stream: "s1", seq: 0, sha256: Self.sha("a"), seconds: 5)
        #expect(try await ledger.charge(first) == .charged(.init(device: "car-1", spentSeconds: 5, segments: 1)))
        // The same key again: nothing changes, and the digest first charged is told.
        var again = first
        again.sha256 = Self.sha("b")
        #expect(try await ledger.charge(again) == .alreadyCharged(.init(device: "car-1", spentSeconds: 5, segments: 1), sha256: Self.sha("a")))
        #expect(try await ledger.charge(UsageCharge(device: "car-1", stream: "s2", seq: 0, sha256: Self.sha("c"), seconds: 4))
            == .charged(.init(device: "car-1", spentSeconds: 9, segments: 2)))
        _ = try await ledger.credit(device: "car-1", seconds: 100, note: "order 1")
        #expect(try await ledger.credit(device: "car-2", seconds: 7, note: "") == .init(device: "car-2", creditedSeconds: 7))
        try await ledger.shutdown()

        let reopened = try await SQLiteLedger.open(path: path, logger: Self.logger)
        #expect(try await reopened.balances() == [
            .init(device: "car-1", creditedSeconds: 100, spentSeconds: 9, segments: 2), .init(device: "car-2", creditedSeconds: 7),
        ])
        #expect(try await reopened.balance(device: "car-1").remaining(allowance: 0) == 91)
        #expect(try await reopened.balance(device: "car-1").remaining(allowance: nil) == nil)
        #expect(try await reopened.balance(device: "nobody") == .init(device: "nobody"))
        try await reopened.shutdown()
        // A tool nobody here wrote reads the same numbers, when it is installed.
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") {
            let spent = try Command.run("/usr/bin/sqlite3", [path, "SELECT spent, segments FROM balances WHERE device = 'car-1'"])
            #expect(spent.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "9|2")
        }
    }

    @Test func concurrentChargesOfOneSegmentChargeItOnce() async throws {
        let ledger = try await SQLiteLedger.open(path: ":memory:", logger: Self.logger)
        let charge = UsageCharge(device: "car-1", stream: "s1", seq: 7, sha256: Self.sha("x"), seconds: 5)
        let results = try await withThrowingTaskGroup(of: ChargeResult.self) { group in
            for _ in 0..<50 { group.addTask { try await ledger.charge(charge) } }
            return try await group.reduce(into: [ChargeResult]()) { $0.append($1) }
        }
        #expect(results.filter { if case .charged = $0 { true } else { false } }.count == 1)
        #expect(try await ledger.balance(device: "car-1") == .init(device: "car-1", spentSeconds: 5, segments: 1))
    }

    @Test func valuesNoDeviceCouldSendAreRefused() async throws {
        let ledger = try await SQLiteLedger.open(path: ":memory:", logger: Self.logger)
        for charge in [
            UsageCharge(device: "", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: 1),
            UsageCharge(device: "d", stream: "s", seq: -1, sha256: Self.sha("a"), seconds: 1),
            UsageCharge(device: "d", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: -5),
            UsageCharge(device: "d", stream: "s", seq: 0, sha256: Self.sha("a"), seconds: .max),
            UsageCharge(device: "d", stream: "s", seq: 0, sha256: "short", seconds: 1),
        ] {
            await #expect(throws: LedgerError.self) { try await ledger.charge(charge) }
        }
        await #expect(throws: LedgerError.self) { try await ledger.credit(device: "d", seconds: 0, note: "") }
        await #expect(throws: LedgerError.self) { try await ledger.credit(device: "d", seconds: .max, note: "") }
        #expect(try await ledger.balances().isEmpty)
        // Sums that could overflow saturate instead.
        #expect(DeviceBalance(device: "d", creditedSeconds: .max, spentSeconds: 0).remaining(allowance: .max) == .max)
        #expect(DeviceBalance(device: "d", creditedSeconds: 0, spentSeconds: .max).remaining(allowance: .min) == 0)
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
        let data: [UInt8] = Array(repeating: 4, count: 3000)
        let header: @Sendable (Int) -> String = { seq in
            ServerHardeningTests.header(seq: seq, durationMs: 5000, bytes: data.count, chunks: 1, sha: ServerHardeningTests.sha(data))
        }
        let hello = ClientMessage.hello(.init(device: "car-1", locale: "en-US", agent: "test",
                                              video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000), stream: "run-1")).encoded()
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
