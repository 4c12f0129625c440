import Foundation
import Glibc
import Testing

/// A program of this package (beside the test bundle) running in the background, its output
/// going to files the test reads while it runs.
final class Spawned {
    static let buildFolder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()

    let process = Process()
    let stdoutFile: URL
    let stderrFile: URL

    /// `prefix` runs first (e.g. `ip netns exec NAME`), with the program's path after it.
    /// `absolute`: `program` is a path, not one of this package's programs.
    init(_ program: String, _ arguments: [String], prefix: [String] = [], folder: URL, absolute: Bool = false) throws {
        let path = absolute ? program : Self.buildFolder.appendingPathComponent(program).path
        let name = "\(URL(fileURLWithPath: program).lastPathComponent)-\(UUID().uuidString.prefix(8))"
        stdoutFile = folder.appendingPathComponent("\(name).out")
        stderrFile = folder.appendingPathComponent("\(name).err")
        _ = FileManager.default.createFile(atPath: stdoutFile.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrFile.path, contents: nil)
        if let first = prefix.first {
            process.executableURL = URL(fileURLWithPath: first)
            process.arguments = Array(prefix.dropFirst()) + [path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
        }
        process.standardOutput = try FileHandle(forWritingTo: stdoutFile)
        process.standardError = try FileHandle(forWritingTo: stderrFile)
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { (try? String(contentsOf: stdoutFile, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOf: stderrFile, encoding: .utf8)) ?? "" }

    /// Polls `condition` every 10 ms; false if `timeout` passes first.
    @discardableResult
    /// Sleeps between polls without holding one of the few threads every test's tasks run on.
    func wait(for timeout: Duration, until condition: (Spawned) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(self) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self)
    }

    /// Sends `signal` and waits for the exit; the exit status.
    @discardableResult
    func stop(_ signal: Int32 = SIGTERM) -> Int32 {
        if process.isRunning { kill(pid, signal) }
        process.waitUntilExit()
        return process.terminationStatus
    }

    func count(_ text: String, in output: String) -> Int {
        output.components(separatedBy: text).count - 1
    }

    /// Open file descriptors and threads of the process, from /proc.
    var resources: (fds: Int, threads: Int, rssKiB: Int) {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
            return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? -1
        }
        return (fds, field("Threads"), field("VmRSS"))
    }
}

/// A temporary folder with the files an agent and a server need to talk.
struct LoopFiles {
    let folder: URL
    let token = "loop-token-1"

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("loop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try write("tokens.yaml", "\(token): loop-car\n")
        try write("token", token + "\n", mode: 0o600)
        try write("script.yaml", "- text: \"slow down\"\n  lang: en-US\n- clear: true\n")
    }

    func path(_ name: String) -> String { folder.appendingPathComponent(name).path }

    func write(_ name: String, _ text: String, mode: Int = 0o644) throws {
        try Data(text.utf8).write(to: folder.appendingPathComponent(name))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path(name))
    }

    /// The `camera` and `encoder` sections of every spawned agent: the test pattern at 320x180,
    /// 10 fps, encoded by libx265.
    static func testPattern(pace: String = "realtime", crf: Int = 28, segmentSeconds: Int) -> String {
        """
        camera:
          source: test-pattern
          width: 320
          height: 180
          fps: 10
          pace: \(pace)
        encoder:
          preference: [libx265]
          crf: \(crf)
          segmentSeconds: \(segmentSeconds)
        """
    }

    /// The agent recording the test pattern in 1-second segments, without a server; `extra` is
    /// more YAML, `prefix` runs first (e.g. a shell that lowers the file limit).
    func startRecorder(extra: String = "", prefix: [String] = []) throws -> Spawned {
        try write("agent.yaml", """
            \(Self.testPattern(segmentSeconds: 1))
            recording:
              dir: \(path("recordings"))
            speech:
              sink: wav:\(path("speech"))
            status:
              socket: \(path("status.sock"))
            \(extra)
            """)
        return try Spawned("dashcam-agent", ["record", "--config", path("agent.yaml")], prefix: prefix, folder: folder)
    }

    /// A server config listening on `host:port` (0 picks a free port).
    func serverConfig(host: String = "127.0.0.1", port: Int = 0) throws -> String {
        try write("server.yaml", """
            server:
              host: \(host)
              port: \(port)
              tokensFile: \(path("tokens.yaml"))
            analyzer:
              kind: scripted
              scriptFile: \(path("script.yaml"))
            log:
              level: info

            """)
        return path("server.yaml")
    }

    /// An agent config: the test pattern, streaming to `url`; `uplink` adds keys to that section.
    /// `crf: 0` makes segments big (lossless), to fill socket buffers quickly.
    /// Speech goes to WAV files in `speech/`, the status socket is `status.sock`, both in the folder.
    func agentConfig(url: String, pace: String = "realtime", crf: Int = 28, segmentSeconds: Int = 5, caFile: String? = nil,
                     uplink: [String: String] = [:]) throws -> String {
        try write("agent.yaml", """
            \(Self.testPattern(pace: pace, crf: crf, segmentSeconds: segmentSeconds))
            recording:
              dir: \(path("segments"))
            uplink:
              url: \(url)
              allowInsecure: true
            \(caFile.map { "  caFile: \($0)" } ?? "")
              tokenFile: \(path("token"))
              deviceId: loop-car
            \(uplink.map { "  \($0.key): \($0.value)" }.joined(separator: "\n"))
            device:
              locale: en-US
            speech:
              sink: wav:\(path("speech"))
            status:
              socket: \(path("status.sock"))

            """)
        return path("agent.yaml")
    }

    /// Starts `guidance-server` with ``serverConfig(host:port:)`` and waits for its "listening on"
    /// line; returns it with the port it bound (0 picks a free one).
    func startServer(port: Int = 0, prefix: [String] = [], host: String = "127.0.0.1") async throws -> (Spawned, Int) {
        let server = try Spawned("guidance-server", ["--config", try serverConfig(host: host, port: port)], prefix: prefix, folder: folder)
        try #require(await server.wait(for: .seconds(20)) { $0.stderr.contains("listening on") }, "server did not start: \(server.stderr)")
        let line = server.stderr.split(separator: "\n").first { $0.contains("listening on") } ?? ""
        return (server, Int(line.split(separator: ":").last ?? "") ?? 0)
    }

    func remove() { try? FileManager.default.removeItem(at: folder) }
}
