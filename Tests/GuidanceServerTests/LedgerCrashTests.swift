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
            let result = switch self {
            case .sqlite: try Command.execute("/usr/bin/sqlite3", [String(ledger.dropFirst("sqlite:".count)), query])
            case .postgres: try await PostgresServer.shared().psql(database: String(ledger.split(separator: "/").last ?? ""), query)
            }
            guard result.status == 0 else { throw PostgresServer.Failure(description: "\(query): \(result.stderr)") }
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Credit `i` is 2^i seconds, so the balance says which credits were written: each bit is one.
    /// Two rounds: the second writes to a ledger whose last writers were killed (a WAL and all).
    @Test(arguments: Backend.allCases)
    func creditsKilledWithSignal9KeepEveryReportedOneAndNoTornOne(_ backend: Backend) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let ledger = try await backend.ledger(in: folder, name: "usage")
        let config = try Self.config(in: folder, name: "usage", ledger: ledger)
        // Kills are spread over the time the round's credits started together take on a ledger of their own.
        let warmUp = try Self.config(in: folder, name: "warm-up", ledger: try await backend.ledger(in: folder, name: "warm-up"))
        let span = try await Self.span(of: backend.writers, config: warmUp)

        var reported = 0, killedAfterCommit = 0, killed = 0, balance = 0
        var generator = SystemRandomNumberGenerator()
        for round in 0..<2 {
            let bits = Array((round * 20)..<(round * 20 + backend.writers))
            let started = ContinuousClock.now
            let credits = try bits.map { bit in
                try Spawned("guidance-server", ["credit", "car-1", "\(1 << bit)", "--note", "credit \(bit)", "--config", config], folder: folder)
            }
            // Readers beside the writers, never killed: WAL lets them read while credits commit.
            let readers = try (0..<3).map { _ in try Spawned("guidance-server", ["usage", "--json", "--config", config], folder: folder) }
            // Every other writer is killed, at a random moment of the span: while it starts,
            // opens the file, writes its row or prints.
            let victims = Set(stride(from: round, to: credits.count, by: 2))
            let moments = victims.map { (index: $0, at: started + span * Double.random(in: 0...1, using: &generator)) }
            for victim in moments.sorted(by: { $0.at < $1.at }) {
                try await Task.sleep(until: victim.at, clock: .continuous)
                if credits[victim.index].process.isRunning { kill(credits[victim.index].pid, SIGKILL) }
            }
            for process in credits + readers {
                let exited = await process.wait(for: .seconds(120)) { !$0.process.isRunning }
                #expect(exited, "guidance-server \(process.process.arguments ?? []) still runs after 120 s")
                if !exited { kill(process.pid, SIGKILL) }
                process.process.waitUntilExit()
            }
            for reader in readers {
                #expect(reader.process.terminationStatus == 0, "usage beside the writers failed: \(reader.stderr)")
            }

            let before = balance
            balance = try await Self.usage(config: config).creditedSeconds
            #expect(balance & before == before, "round \(round) lost credits of the round before: \(before) then \(balance)")
            for (index, process) in credits.enumerated() {
                let bit = bits[index], mine = 1 << bit
                let committed = balance & mine != 0
                if process.process.terminationReason == .uncaughtSignal {
                    #expect(victims.contains(index), "credit \(bit) died of signal \(process.process.terminationStatus): \(process.stderr)")
                    killed += 1
                    if committed { killedAfterCommit += 1 }
                    continue
                }
                // Not killed in time, or not killed at all: it must have finished and said so.
                #expect(process.process.terminationStatus == 0, "credit \(bit) exited \(process.process.terminationStatus): \(process.stderr)")
                guard process.process.terminationStatus == 0 else { continue }
                reported += 1
                #expect(committed, "credit \(bit) reported success but is not in the balance \(balance)")
                // The balance it printed already held its own credit.
                let printed = process.stdout.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
                #expect(printed.map { $0 & mine != 0 } == true, "credit \(bit) printed \(process.stdout)")
            }
            // No credit but these processes' (no bit outside the rounds so far).
            #expect(balance >> (round * 20 + backend.writers) == 0, "balance \(balance) has credits nobody made")
        }
        let written = balance.nonzeroBitCount
        print("\(backend): kill -9 over \(span): \(killed) credits killed (\(killedAfterCommit) after their commit), \(reported) reported; \(written) in the ledger")

        // The rows agree with the balance: one credits row per bit, summing to it, and an intact file.
        let report = try await Self.usage(config: config)
        #expect(report.spentSeconds == 0 && report.segments == 0 && report.remainingSeconds == report.creditedSeconds)
        let rows = try await backend.sql(ledger, "SELECT count(*) || '|' || sum(seconds) || '|' || count(DISTINCT note) FROM credits WHERE device = 'car-1'")
        #expect(rows == "\(written)|\(report.creditedSeconds)|\(written)")
        #expect(try await backend.sql(ledger, "SELECT credited FROM balances WHERE device = 'car-1'") == "\(report.creditedSeconds)")
        if backend == .sqlite {
            #expect(try await backend.sql(ledger, "PRAGMA integrity_check") == "ok")
        }
    }

    /// A configuration whose `ledger` is `ledger`.
    static func config(in folder: URL, name: String, ledger: String) throws -> String {
        let file = folder.appendingPathComponent("\(name).yaml")
        try Data("""
            analyzer:
              kind: scripted
              scriptFile: \(folder.appendingPathComponent("script.yaml").path)
            usage:
              remainingSeconds: 0
            ledger: \(ledger)

            """.utf8).write(to: file)
        return file.path
    }

    /// The time `count` credits started together take until the last has exited.
    static func span(of count: Int, config: String) async throws -> Duration {
        let started = ContinuousClock.now
        let folder = URL(fileURLWithPath: config).deletingLastPathComponent()
        let credits = try (0..<count).map { _ in try Spawned("guidance-server", ["credit", "warm-up", "1", "--config", config], folder: folder) }
        for process in credits {
            await process.wait(for: .seconds(120)) { !$0.process.isRunning }
            #expect(process.stop(SIGKILL) == 0, "credit exited \(process.process.terminationStatus): \(process.stderr)")
        }
        return ContinuousClock.now - started
    }

    /// `guidance-server usage car-1 --json`, decoded.
    static func usage(config: String) async throws -> Report {
        let program = Spawned.buildFolder.appendingPathComponent("guidance-server").path
        let result = try await Command.executeAsync(program, ["usage", "car-1", "--json", "--config", config])
        #expect(result.status == 0, "usage: \(result.stderr)")
        let reports = try JSONDecoder().decode([Report].self, from: Data(result.stdout.utf8))
        return try #require(reports.first, "usage printed no device: \(result.stdout)")
    }
}
