import Foundation
import Testing
import TestSupport

/// The operator's `guidance-server credit` and `usage`, run as the built program: what they print,
/// and the exit status a script can act on (64 bad arguments, 69 ledger unavailable, 78 config).
@Suite struct LedgerCommandTests {
    static let program = Spawned.buildFolder.appendingPathComponent("guidance-server").path

    /// A folder with `server.yaml` naming `ledger` (and `extra` YAML); removed by the caller.
    static func setUp(ledger: String? = nil, extra: String = "") throws -> (folder: URL, config: String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-command-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let config = folder.appendingPathComponent("server.yaml").path
        try Data(
            """
            analyzer:
              kind: scripted
              scriptFile: \(folder.appendingPathComponent("script.yaml").path)
            ledger: \(ledger ?? "sqlite:" + folder.appendingPathComponent("usage.sqlite").path)
            \(extra)

            """.utf8
        ).write(to: URL(fileURLWithPath: config))
        return (folder, config)
    }

    static func run(_ arguments: [String]) async throws -> Command.Result {
        try await Command.executeAsync(program, arguments)
    }

    @Test func creditAndUsagePrintWhatTheLedgerHolds() async throws {
        let (folder, config) = try Self.setUp(extra: "usage:\n  remainingSeconds: 100")
        defer { try? FileManager.default.removeItem(at: folder) }
        let small = try await Self.run(["credit", "car-2", "30", "--note", "order 7", "--config", config])
        #expect(small.status == 0, "\(small.stderr)")
        #expect(small.stdout == "car-2                        30          0         0  130\n")
        // Past 2^32: the columns hold 64-bit balances.
        let large = try await Self.run(["credit", "car-1", "5000000000", "--config", config])
        #expect(large.stdout == "car-1                5000000000          0         0  5000000100\n", "\(large.stderr)")

        let table = try await Self.run(["usage", "--config", config])
        #expect(table.status == 0, "\(table.stderr)")
        #expect(
            table.stdout == """
                device                 credited      spent  segments  remaining
                car-1                5000000000          0         0  5000000100
                car-2                        30          0         0  130

                """)
        let one = try await Self.run(["usage", "car-2", "--json", "--config", config])
        #expect(
            one.stdout
                == #"[{"creditedSeconds":30,"device":"car-2","inputTokens":0,"outputTokens":0,"remainingSeconds":130,"segments":0,"spentSeconds":0}]"#
                + "\n")
        // A device the ledger never saw has the allowance and nothing else.
        let unknown = try await Self.run(["usage", "car-9", "--json", "--config", config])
        #expect(
            unknown.stdout
                == #"[{"creditedSeconds":0,"device":"car-9","inputTokens":0,"outputTokens":0,"remainingSeconds":100,"segments":0,"spentSeconds":0}]"#
                + "\n")
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") {
            let notes = try Command.run(
                "/usr/bin/sqlite3",
                [
                    folder.appendingPathComponent("usage.sqlite").path,
                    "SELECT device || '|' || seconds || '|' || note FROM credits ORDER BY id"
                ])
            #expect(notes.stdout == "car-2|30|order 7\ncar-1|5000000000|\n")
        }
    }

    /// The same commands on a PostgreSQL ledger, its numbers as psql reads them; a database
    /// that does not exist is told in PostgreSQL's words.
    @Test func creditAndUsageOnPostgreSQL() async throws {
        let server = try await PostgresServer.shared()
        let url = try await server.createDatabase()
        let (folder, config) = try Self.setUp(ledger: url, extra: "usage:\n  remainingSeconds: 100")
        defer { try? FileManager.default.removeItem(at: folder) }
        let small = try await Self.run(["credit", "car-2", "30", "--note", "order 7", "--config", config])
        #expect(small.stdout == "car-2                        30          0         0  130\n", "\(small.stderr)")
        let large = try await Self.run(["credit", "car-1", "5000000000", "--config", config])
        #expect(large.stdout == "car-1                5000000000          0         0  5000000100\n", "\(large.stderr)")
        let json = try await Self.run(["usage", "--json", "--config", config])
        #expect(
            json.stdout == "["
                + [
                    #"{"creditedSeconds":5000000000,"device":"car-1","inputTokens":0,"outputTokens":0,"remainingSeconds":5000000100,"segments":0,"spentSeconds":0}"#,
                    #"{"creditedSeconds":30,"device":"car-2","inputTokens":0,"outputTokens":0,"remainingSeconds":130,"segments":0,"spentSeconds":0}"#
                ].joined(separator: ",") + "]\n", "\(json.stderr)")
        let rows = try await server.psql(
            database: String(url.split(separator: "/").last ?? ""),
            """
            SELECT b.device || '|' || b.credited || '|' || string_agg(c.note, ',') FROM balances b JOIN credits c USING (device)
            GROUP BY b.device, b.credited ORDER BY b.device
            """)
        #expect(rows.stdout == "car-1|5000000000|\ncar-2|30|order 7\n", "\(rows.stderr)")

        let (otherFolder, missing) = try Self.setUp(ledger: "postgres://postgres@127.0.0.1:\(server.port)/no_such_ledger")
        defer { try? FileManager.default.removeItem(at: otherFolder) }
        let refused = try await Self.run(["usage", "--config", missing])
        #expect(refused.status == 69)
        #expect(
            refused.stderr == """
                guidance-server: cannot reach the usage ledger postgres@127.0.0.1:\(server.port)/no_such_ledger: \
                PostgreSQL says: database "no_such_ledger" does not exist (SQLSTATE 3D000)

                """)
    }

    @Test func withoutAnAllowanceWhatIsLeftIsUnlimited() async throws {
        let (folder, config) = try Self.setUp()
        defer { try? FileManager.default.removeItem(at: folder) }
        let credit = try await Self.run(["credit", "car-1", "60", "--config", config])
        #expect(credit.stdout == "car-1                        60          0         0  unlimited\n", "\(credit.stderr)")
        let json = try await Self.run(["usage", "--json", "--config", config])
        #expect(
            json.stdout
                == #"[{"creditedSeconds":60,"device":"car-1","inputTokens":0,"outputTokens":0,"remainingSeconds":null,"segments":0,"spentSeconds":0}]"#
                + "\n")
        // An empty ledger: the titles only, and an empty array.
        let (emptyFolder, empty) = try Self.setUp()
        defer { try? FileManager.default.removeItem(at: emptyFolder) }
        #expect(
            try await Self.run(["usage", "--config", empty]).stdout == "device                 credited      spent  segments  remaining\n")
        #expect(try await Self.run(["usage", "--json", "--config", empty]).stdout == "[]\n")
    }

    /// Another process writing (sqlite3 in a transaction, here): `credit` waits for it, then
    /// writes after it, rather than failing with "database is locked".
    @Test func aCreditWaitsForAnotherWriter() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") else {
            Issue.record("sqlite3 is not installed (scripts/install-deps.sh installs it)")
            return
        }
        let (folder, config) = try Self.setUp()
        defer { try? FileManager.default.removeItem(at: folder) }
        _ = try await Self.run(["credit", "car-1", "1", "--config", config])
        let output = folder.appendingPathComponent("sqlite3.out")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let writer = Process(), input = Pipe()
        writer.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        writer.arguments = [folder.appendingPathComponent("usage.sqlite").path]
        writer.standardInput = input
        writer.standardOutput = try FileHandle(forWritingTo: output)
        try writer.run()
        try input.fileHandleForWriting.write(
            contentsOf: Data(
                """
                BEGIN IMMEDIATE;
                INSERT INTO credits (device, seconds, note, at) VALUES ('car-1', 10, 'by hand', '');
                SELECT 'locked';

                """.utf8))
        var locked = false
        for _ in 0..<1000 where !locked {
            locked = (try? String(contentsOf: output, encoding: .utf8))?.contains("locked") == true
            if !locked { try await Task.sleep(for: .milliseconds(10)) }
        }
        try #require(locked, "sqlite3 never held the file")

        let spawned = ContinuousClock.now
        let credit = try Spawned("guidance-server", ["credit", "car-1", "100", "--config", config], folder: folder)
        // It cannot finish while the lock is held; had it given up, it would have ended by now.
        try await Task.sleep(for: .milliseconds(500))
        // Unless this machine was so busy that the sleep outlasted the ledger's 10-s wait for the
        // file: then giving up, with the lock named, is right, and nothing more can be judged.
        let waited = ContinuousClock.now - spawned
        guard waited < .seconds(9) else {  // SQLiteLedger.busyTimeoutMs, less a second
            try input.fileHandleForWriting.write(contentsOf: Data("COMMIT;\n".utf8))
            try input.fileHandleForWriting.close()
            writer.waitUntilExit()
            await credit.wait(for: .seconds(30)) { !$0.process.isRunning }
            let status = credit.stop()
            #expect(status == 0 || credit.stderr.contains("database is locked"), "after \(waited): \(credit.stderr)")
            print("credit: the test's 0.5-s sleep took \(waited); the ledger's wait could not be judged")
            return
        }
        #expect(credit.process.isRunning, "credit ended while another process held the file: \(credit.stderr)")
        let stat = (try? String(contentsOfFile: "/proc/\(credit.pid)/stat", encoding: .utf8)) ?? ""
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        let ticks = fields.count > 12 ? (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0) : -1
        print("credit used \(ticks) clock ticks of CPU in 0.5 s of waiting for the file")
        try input.fileHandleForWriting.write(contentsOf: Data("COMMIT;\n".utf8))
        try input.fileHandleForWriting.close()
        writer.waitUntilExit()
        await credit.wait(for: .seconds(30)) { !$0.process.isRunning }
        #expect(credit.stop() == 0, "\(credit.stderr)")
        // Written after the other writer's credit: its balance holds both.
        #expect(credit.stdout == "car-1                       111          0         0  unlimited\n")
    }

    @Test(arguments: [
        (["credit", "car-1", "0"], "SECONDS must be 1 or more, not 0"),
        // A negative number reads as an option, so the seconds are missing.
        (["credit", "car-1", "-5"], "Missing expected argument '<seconds>'"),
        (["credit", "car-1", "ten"], "'ten' is invalid for '<seconds>'"),
        (["credit", "car-1"], "Missing expected argument '<seconds>'"),
        (["credit", "", "5"], "DEVICE must not be empty"),
        (["credit", "car-1", "2000000000000"], "seconds 2000000000000 is not within 1…1000000000000"),
        (["usage", "car-1", "car-2"], "Unexpected argument 'car-2'")
    ])
    func badArgumentsExit64AndSayWhy(arguments: [String], message: String) async throws {
        let (folder, config) = try Self.setUp()
        defer { try? FileManager.default.removeItem(at: folder) }
        let result = try await Self.run(arguments + ["--config", config])
        #expect(result.status == 64, "\(arguments): \(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        // Nothing was credited.
        #expect(try await Self.run(["usage", "--json", "--config", config]).stdout == "[]\n")
    }

    /// A ledger that cannot be opened or reached: 69 and the reason, at once (PostgreSQL's client
    /// alone would retry for a minute). Port 1 on loopback refuses connections.
    @Test(arguments: [
        ("sqlite:/nonexistent-folder/usage.sqlite", "cannot open the usage ledger /nonexistent-folder/usage.sqlite"),
        ("postgres://postgres@127.0.0.1:1/ledger", "cannot reach the usage ledger postgres@127.0.0.1:1/ledger: ")
    ])
    func anUnavailableLedgerExits69AndSaysWhy(ledger: String, message: String) async throws {
        let (folder, config) = try Self.setUp(ledger: ledger)
        defer { try? FileManager.default.removeItem(at: folder) }
        for arguments in [["credit", "car-1", "5"], ["usage"]] {
            let result = try await Self.run(arguments + ["--config", config])
            #expect(result.status == 69, "\(arguments): \(result.stderr)")
            #expect(result.stderr.hasPrefix("guidance-server: \(message)"), "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }

    @Test func aConfigurationProblemExits78() async throws {
        let missing = try await Self.run(["usage", "--config", "/nonexistent-folder/server.yaml"])
        #expect(missing.status == 78 && missing.stderr.contains("/nonexistent-folder/server.yaml"), "\(missing.stderr)")
        let (folder, config) = try Self.setUp(ledger: #""sqlite:""#)
        defer { try? FileManager.default.removeItem(at: folder) }
        let empty = try await Self.run(["credit", "car-1", "5", "--config", config])
        #expect(empty.status == 78 && empty.stderr.contains("ledger: 'sqlite:'"), "\(empty.stderr)")
    }
}
