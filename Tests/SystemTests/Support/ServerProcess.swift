import Foundation
import Glibc
import TestSupport

/// The built `guidance-server` running as its own process on a free loopback port, with its
/// tokens, script and config in a temporary folder: what an operator runs, so a crash or a trap is
/// a dead process the test sees, not a dead test runner.
final class ServerProcess: @unchecked Sendable {
    static let tokens = ["good-token": "car-1", "other-token": "car-2"]

    let folder: URL
    /// Removed with the process's end unless it was given (a restart keeps its state there).
    private let ownsFolder: Bool
    let process: Spawned
    let port: Int

    /// `config` is YAML added to the `server:` section (indented two spaces), `extra` after it;
    /// `analyzer` replaces the scripted analyzer's keys (indented two spaces).
    init(server config: [String: String] = [:], analyzer: [String: String]? = nil, extra: String = "", folder existing: URL? = nil)
        async throws
    {
        folder = existing ?? FileManager.default.temporaryDirectory.appendingPathComponent("server-\(UUID().uuidString)")
        ownsFolder = existing == nil
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Self.write(folder, "tokens.yaml", Self.tokens.map { "\($0.key): \($0.value)\n" }.joined(), mode: 0o600)
        try Self.write(folder, "script.yaml", "- text: \"slow down\"\n  lang: en-US\n- clear: true\n")
        let keys = ["host": "127.0.0.1", "port": "0", "tokensFile": folder.appendingPathComponent("tokens.yaml").path]
            .merging(config) { $1 }
        try Self.write(
            folder, "server.yaml",
            """
            server:
            \(keys.sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value)" }.joined(separator: "\n"))
            analyzer:
            \((analyzer ?? ["kind": "scripted", "scriptFile": folder.appendingPathComponent("script.yaml").path])
                .sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value)" }.joined(separator: "\n"))
            \(extra)
            \(extra.contains("ledger:") ? "" : "ledger: sqlite:\(folder.appendingPathComponent("usage.sqlite").path)")

            """)
        // Its own files (the run marker, relative key files) in its folder, as systemd's StateDirectory= would have them.
        process = try Spawned(
            "guidance-server", ["--config", folder.appendingPathComponent("server.yaml").path], folder: folder,
            environment: ["STATE_DIRECTORY": folder.path])
        var port: Int?
        await process.wait(for: .seconds(30)) { spawned in
            port = Self.listeningPort(in: spawned.stderr)
            return port != nil || !spawned.process.isRunning
        }
        guard let port else {
            throw Failure("guidance-server did not start: \(process.stderr.suffix(2000))")
        }
        self.port = port
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func write(_ folder: URL, _ name: String, _ text: String, mode: Int = 0o644) throws {
        let file = folder.appendingPathComponent(name)
        try Data(text.utf8).write(to: file)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file.path)
    }

    /// The port in "listening on HOST:PORT".
    static func listeningPort(in log: String) -> Int? {
        guard let line = log.split(separator: "\n").first(where: { $0.contains("listening on ") }),
            let last = line.split(separator: ":").last
        else { return nil }
        return Int(last.prefix { $0.isNumber })
    }

    var isRunning: Bool { process.process.isRunning }
    /// Peak resident memory so far (VmHWM), KiB.
    var peakRSSKiB: Int { Self.status(process.pid, "VmHWM") }
    var rssKiB: Int { Self.status(process.pid, "VmRSS") }

    /// User + system CPU time so far, seconds.
    var cpuSeconds: Double {
        let stat = (try? String(contentsOfFile: "/proc/\(process.pid)/stat", encoding: .utf8)) ?? ""
        // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th there.
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return -1 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func status(_ pid: Int32, _ name: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? -1
    }

    func stop() { process.stop(SIGKILL) }

    deinit {
        process.stop(SIGKILL)
        if ownsFolder { try? FileManager.default.removeItem(at: folder) }
    }
}
