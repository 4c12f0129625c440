import Foundation
import Glibc
import Testing
import TestSupport

/// A temporary folder with the files an agent and a server need to talk.
struct LoopFiles {
    let folder: URL
    let token = "loop-token-1"

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("loop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try write("tokens.yaml", "\(token): loop-car\n", mode: 0o600)
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
        try write(
            "agent.yaml",
            """
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
        try write(
            "server.yaml",
            """
            server:
              host: \(host)
              port: \(port)
              tokensFile: \(path("tokens.yaml"))
            analyzer:
              kind: scripted
              scriptFile: \(path("script.yaml"))
            log:
              level: info
            ledger: sqlite:\(path("usage.sqlite"))

            """)
        return path("server.yaml")
    }

    /// An agent config: the test pattern, streaming to `url`; `uplink` adds keys to that section.
    /// `crf: 0` makes segments big (lossless), to fill socket buffers quickly.
    /// Speech goes to WAV files in `speech/`, the status socket is `status.sock`, both in the folder.
    func agentConfig(
        url: String, pace: String = "realtime", crf: Int = 28, segmentSeconds: Int = 5, caFile: String? = nil,
        uplink: [String: String] = [:], extra: String = ""
    ) throws -> String {
        try write(
            "agent.yaml",
            """
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
            \(extra)

            """)
        return path("agent.yaml")
    }

    /// Starts `guidance-server` with ``serverConfig(host:port:)`` and waits for its "listening on"
    /// line; returns it with the port it bound (0 picks a free one).
    func startServer(port: Int = 0, prefix: [String] = [], host: String = "127.0.0.1") async throws -> (Spawned, Int) {
        let server = try Spawned("guidance-server", ["--config", try serverConfig(host: host, port: port)], prefix: prefix, folder: folder)
        try #require(await server.wait(for: .seconds(60)) { $0.stderr.contains("listening on") }, "server did not start: \(server.stderr)")
        let line = server.stderr.split(separator: "\n").first { $0.contains("listening on") } ?? ""
        return (server, Int(line.split(separator: ":").last ?? "") ?? 0)
    }

    func remove() { try? FileManager.default.removeItem(at: folder) }
}
