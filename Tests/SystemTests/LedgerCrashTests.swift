import Foundation
import Glibc
import Testing
import TestSupport

/// The ledger (an SQLite file, a PostgreSQL database) under operators' `guidance-server credit`
/// processes killed with -9 while they run: every credit a process reported is kept, none is torn,
/// and the balance is exactly the sum of the credits rows.
@Suite struct LedgerCrashTests {
    /// `usage --json`, one device.
    struct Report: Decodable {
        var device: String
        var creditedSeconds: Int
        var spentSeconds: Int
        var segments: Int
        var remainingSeconds: Int?
    }

    enum Backend: String, CaseIterable, Sendable, CustomStringConvertible {
        case sqlite, postgres
        var description: String { rawValue }

        /// Credits started at once in each round: fewer on PostgreSQL, where each is 2 connections
        /// of a server the other suites share.
        var writers: Int { self == .sqlite ? 20 : 10 }

        /// A new, empty ledger: its `ledger` value.
        func ledger(in folder: URL, name: String) async throws -> String {
            switch self {
            case .sqlite: "sqlite:" + folder.appendingPathComponent("\(name).sqlite").path
            case .postgres: try await PostgresServer.shared().createDatabase()
            }
        }

        /// One query through the store's own client (sqlite3, psql), trimmed.
        func sql(_ ledger: String, _ query: String) async throws -> String {
            let result =
                switch self {
                case .sqlite: try Command.execute("/usr/bin/sqlite3", [String(ledger.dropFirst("sqlite:".count)), query])
                case .postgres: try await PostgresServer.shared().psql(database: String(ledger.split(separator: "/").last ?? ""), query)
                }
            guard result.status == 0 else { throw PostgresServer.Failure(description: "\(query): \(result.stderr)") }
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Credit `i` of a round is 2^i seconds to the round's device, so its balance says which
    /// credits were written: each bit is one. Each round writes to the ledger whose last writers
    /// were killed the round before (a WAL and all); after the second, rounds go on (4 at most)
    /// until 6 credits were killed while they ran.
    @Test(arguments: Backend.allCases)
    func creditsKilledWithSignal9KeepEveryReportedOneAndNoTornOne(_ backend: Backend) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let ledger = try await backend.ledger(in: folder, name: "usage")
        let config = try Self.config(in: folder, name: "usage", ledger: ledger)
        // Kills fall within the life of the quickest of as many credits started together.
        let warmUp = try Self.config(in: folder, name: "warm-up", ledger: try await backend.ledger(in: folder, name: "warm-up"))
        let span = try await Self.quickest(of: backend.writers, config: warmUp)

        var reported = 0, killedAfterCommit = 0, killed = 0, rounds = 0
        var balances: [String: Int] = [:]
        var generator = SystemRandomNumberGenerator()
        while rounds < 2 || (rounds < 4 && killed < 6) {
            let device = "car-\(rounds)"
            rounds += 1
            let started = ContinuousClock.now
            let credits = try (0..<backend.writers).map { bit in
                try Spawned(
                    "guidance-server", ["credit", device, "\(1 << bit)", "--note", "credit \(bit)", "--config", config], folder: folder)
            }
            // Readers beside the writers, never killed: they read while credits commit.
            let readers = try (0..<3).map { _ in try Spawned("guidance-server", ["usage", "--json", "--config", config], folder: folder) }
            // Every other writer is killed, at a random moment: while it starts, opens the
            // ledger, writes its row or prints.
            let victims = Set(stride(from: rounds % 2, to: credits.count, by: 2))
            let moments = victims.map { (index: $0, at: started + span * Double.random(in: 0...1, using: &generator)) }
            for victim in moments.sorted(by: { $0.at < $1.at }) {
                try await Task.sleep(until: victim.at, clock: .continuous)
                if credits[victim.index].process.isRunning { kill(credits[victim.index].pid, SIGKILL) }
            }
            for process in credits + readers {
                let exited = await process.wait(for: .seconds(120)) { !$0.process.isRunning }
                #expect(
                    exited,
                    "guidance-server \(process.process.arguments ?? []) still runs after 120 s; its threads: \(exited ? "" : process.threads); stdout: \(process.stdout); stderr: \(process.stderr)"
                )
                if !exited { kill(process.pid, SIGKILL) }
                process.process.waitUntilExit()
            }
            for reader in readers {
                #expect(reader.process.terminationStatus == 0, "usage beside the writers failed: \(reader.stderr)")
            }

            let balance = try await Self.usage(device, config: config).creditedSeconds
            balances[device] = balance
            for (bit, process) in credits.enumerated() {
                let committed = balance & (1 << bit) != 0
                if process.process.terminationReason == .uncaughtSignal {
                    #expect(victims.contains(bit), "credit \(bit) died of signal \(process.process.terminationStatus): \(process.stderr)")
                    killed += 1
                    if committed { killedAfterCommit += 1 }
                    continue
                }
                // Not killed in time, or not killed at all: it must have finished and said so.
                #expect(
                    process.process.terminationStatus == 0, "credit \(bit) exited \(process.process.terminationStatus): \(process.stderr)")
                guard process.process.terminationStatus == 0 else { continue }
                reported += 1
                #expect(committed, "credit \(bit) to \(device) reported success but is not in the balance \(balance)")
                // The balance it printed already held its own credit.
                let printed = process.stdout.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
                #expect(printed.map { $0 & (1 << bit) != 0 } == true, "credit \(bit) printed \(process.stdout)")
            }
            #expect(balance >> backend.writers == 0, "balance \(balance) of \(device) has credits nobody made")
        }
        let written = balances.values.map(\.nonzeroBitCount).reduce(0, +)
        print(
            "\(backend): \(rounds) rounds, kills within \(span): \(killed) credits killed (\(killedAfterCommit) after their commit), \(reported) reported; \(written) in the ledger"
        )

        // Later rounds lost nothing of earlier ones, and the rows agree with the balances: one
        // credits row per bit, summing to it. The file is intact.
        for (device, balance) in balances.sorted(by: { $0.key < $1.key }) {
            let report = try await Self.usage(device, config: config)
            #expect(report.creditedSeconds == balance && report.spentSeconds == 0 && report.segments == 0, "\(device): \(report)")
            let rows = try await backend.sql(
                ledger,
                "SELECT count(*) || '|' || coalesce(sum(seconds), 0) || '|' || count(DISTINCT note) FROM credits WHERE device = '\(device)'"
            )
            #expect(rows == "\(balance.nonzeroBitCount)|\(balance)|\(balance.nonzeroBitCount)", "\(device)")
        }
        #expect(
            try await backend.sql(ledger, "SELECT count(*) FROM balances WHERE device NOT IN ('car-0', 'car-1', 'car-2', 'car-3')") == "0")
        if backend == .sqlite {
            #expect(try await backend.sql(ledger, "PRAGMA integrity_check") == "ok")
        }
    }

    /// A configuration whose `ledger` is `ledger`.
    static func config(in folder: URL, name: String, ledger: String) throws -> String {
        let file = folder.appendingPathComponent("\(name).yaml")
        try Data(
            """
            analyzer:
              kind: scripted
              scriptFile: \(folder.appendingPathComponent("script.yaml").path)
            usage:
              remainingSeconds: 0
            ledger: \(ledger)

            """.utf8
        ).write(to: file)
        return file.path
    }

    /// The time the first of `count` credits started together takes to exit.
    static func quickest(of count: Int, config: String) async throws -> Duration {
        let started = ContinuousClock.now
        let folder = URL(fileURLWithPath: config).deletingLastPathComponent()
        let credits = try (0..<count).map { _ in
            try Spawned("guidance-server", ["credit", "warm-up", "1", "--config", config], folder: folder)
        }
        var first: Duration?
        while credits.contains(where: \.process.isRunning) {
            if first == nil, credits.contains(where: { !$0.process.isRunning }) { first = ContinuousClock.now - started }
            try await Task.sleep(for: .milliseconds(2))
        }
        for process in credits {
            #expect(process.stop() == 0, "credit exited \(process.process.terminationStatus): \(process.stderr)")
        }
        return first ?? ContinuousClock.now - started
    }

    /// `guidance-server usage DEVICE --json`, decoded.
    static func usage(_ device: String, config: String) async throws -> Report {
        let program = Spawned.buildFolder.appendingPathComponent("guidance-server").path
        let result = try await Command.executeAsync(program, ["usage", device, "--json", "--config", config])
        #expect(result.status == 0, "usage: \(result.stderr)")
        let reports = try JSONDecoder().decode([Report].self, from: Data(result.stdout.utf8))
        return try #require(reports.first, "usage printed no device: \(result.stdout)")
    }
}
