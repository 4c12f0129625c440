import Foundation
import Glibc
import Testing
import TestSupport

/// The SQLite ledger under operators' `guidance-server credit` processes killed with -9 while
/// they run: every credit a process reported is kept, none is torn, and the balance is exactly
/// the sum of the credits rows.
@Suite struct LedgerCrashTests {
    /// `usage --json`, one device.
    struct Report: Decodable {
        var device: String
        var creditedSeconds: Int
        var spentSeconds: Int
        var segments: Int
        var remainingSeconds: Int?
    }

    /// Credit `i` is 2^i seconds, so the balance says which credits were written: each bit is one.
    /// Two rounds: the second writes to a file whose last writers were killed, WAL and all.
    @Test func creditsKilledWithSignal9KeepEveryReportedOneAndNoTornOne() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let database = folder.appendingPathComponent("usage.sqlite").path
        let config = try Self.config(in: folder, database: database)
        // Kills are spread over the time 20 credits started together take on a ledger of their own.
        let span = try await Self.span(of: 20, config: Self.config(in: folder, database: folder.appendingPathComponent("warm-up.sqlite").path))

        var reported = 0, killedAfterCommit = 0, killed = 0, balance = 0
        var generator = SystemRandomNumberGenerator()
        for round in 0..<2 {
            let bits = Array((round * 20)..<(round * 20 + 20))
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
            #expect(balance >> (round * 20 + 20) == 0, "balance \(balance) has credits nobody made")
        }
        let written = balance.nonzeroBitCount
        print("kill -9 over \(span): \(killed) credits killed (\(killedAfterCommit) after their commit), \(reported) reported; \(written) in the ledger")

        // The rows agree with the balance: one credits row per bit, summing to it, and an intact file.
        let report = try await Self.usage(config: config)
        #expect(report.spentSeconds == 0 && report.segments == 0 && report.remainingSeconds == report.creditedSeconds)
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") {
            let rows = try Command.run("/usr/bin/sqlite3", [
                database, "SELECT count(*) || '|' || sum(seconds) || '|' || count(DISTINCT note) FROM credits WHERE device = 'car-1'",
            ]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(rows == "\(written)|\(report.creditedSeconds)|\(written)")
            let check = try Command.run("/usr/bin/sqlite3", [database, "PRAGMA integrity_check"]).stdout
            #expect(check.trimmingCharacters(in: .whitespacesAndNewlines) == "ok")
        }
    }

    /// A configuration whose ledger is `database`.
    static func config(in folder: URL, database: String) throws -> String {
        let file = folder.appendingPathComponent("\(URL(fileURLWithPath: database).lastPathComponent).yaml")
        try Data("""
            analyzer:
              kind: scripted
              scriptFile: \(folder.appendingPathComponent("script.yaml").path)
            usage:
              remainingSeconds: 0
            ledger: sqlite:\(database)

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
