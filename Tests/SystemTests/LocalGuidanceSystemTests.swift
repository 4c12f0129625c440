import Agent
import Foundation
import Glibc
import RoadScene
import Testing
import TestSupport

/// The agent with no server to reach, recording a dark road from a video file: after
/// `guidance.offlineAfterMs` it says once that it now warns by itself and warns "too dark" in
/// Korean, again only after `offline.repeatMs`; `status` shows it.
@Suite(.serialized) struct LocalGuidanceSystemTests {
    static let agent = Spawned.buildFolder.appendingPathComponent("dashcam-agent").path

    /// A night with nothing lit: black with sensor noise, 640x360 at 10 fps, made by the ffmpeg CLI.
    static func darkVideo(_ path: String, seconds: Int) async throws {
        let made = try await Command.executeAsync(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "color=c=0x0a0a0a:s=640x360:r=10", "-vf", "noise=alls=10:allf=t",
                "-t", "\(seconds)", "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-y", path
            ])
        try #require(made.status == 0, "\(made.stderr)")
    }

    /// The 16-bit samples of a WAV file the agent wrote (a 44-byte header, then PCM).
    static func samples(_ path: String) throws -> [Int16] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard data.count > 44 else { return [] }
        return voiced(data.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) })
    }

    /// How many voiced samples eSpeak-ng's own program makes of `text` with `voice`: the length a
    /// WAV of the agent saying it should have. Each in a process of its own: eSpeak-ng keeps state
    /// from one voice to the next (en-us after en comes out 1 % shorter), so a rendering in this
    /// process, after whatever the other tests said, is no reference.
    static func reference(_ text: String, voice: String) async throws -> Int {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("espeak-\(UUID().uuidString).wav")
        defer { try? FileManager.default.removeItem(at: file) }
        let made = try await Command.executeAsync("/usr/bin/espeak-ng", ["-v", voice, "-w", file.path, "--", text])
        try #require(made.status == 0, "espeak-ng -v \(voice): \(made.stderr)")
        return try samples(file.path).count
    }

    /// Without the near-silence before and after the voice.
    static func voiced(_ samples: [Int16]) -> [Int16] {
        guard let first = samples.firstIndex(where: { abs(Int($0)) > 256 }),
            let last = samples.lastIndex(where: { abs(Int($0)) > 256 })
        else { return [] }
        return Array(samples[first...last])
    }

    @Test func aDarkRoadWithNoServerIsSpokenInKorean() async throws {
        let files = try LoopFiles()
        defer { try? FileManager.default.removeItem(at: files.folder) }
        try await Self.darkVideo(files.path("dark.mp4"), seconds: 14)
        // A server that is not there: the port was free a moment ago and nothing listens.
        let port = try PostgresServer.freePort()
        try files.write(
            "agent.yaml",
            """
            camera:
              source: file
              file: \(files.path("dark.mp4"))
              width: 640
              height: 360
              fps: 10
            encoder:
              preference: [libx265]
            recording:
              dir: \(files.path("recordings"))
            uplink:
              url: ws://127.0.0.1:\(port)/v1/stream
              allowInsecure: true
              tokenFile: \(files.path("token"))
            device:
              locale: ko-KR
            speech:
              sink: wav:\(files.path("speech"))
            haptics:
              required: false
            status:
              socket: \(files.path("status.sock"))
            guidance:
              offlineAfterMs: 2000
            offline:
              repeatMs: 4000

            """)
        let agent = try Spawned("dashcam-agent", ["record", "--config", files.path("agent.yaml")], folder: files.folder)
        defer { agent.stop() }
        let warning = "guidance (local): too_dark: 카메라 화면이 너무 어둡습니다."
        try #require(await agent.wait(for: .seconds(30)) { $0.stderr.contains(warning) }, "\(agent.stderr.suffix(3000))")
        let firstWarning = ContinuousClock.now

        let json = try await Command.executeAsync(Self.agent, ["status", "--json", "--socket", files.path("status.sock")])
        #expect(json.status == 0, "\(json.stderr)")
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(json.stdout.utf8))
        let offline = try #require(status.localGuidance)
        #expect(offline.state == "on" && offline.reason == "no session", "\(offline)")
        #expect(offline.lastFinding?.finding == "too_dark")
        #expect(offline.looked >= 1 && offline.spoken >= 1)
        #expect(status.uplink.state != "connected")
        let text = try await Command.executeAsync(Self.agent, ["status", "--socket", files.path("status.sock")])
        #expect(text.stdout.contains("local guidance: on (no session)") && text.stdout.contains("last finding: too_dark"), "\(text.stdout)")
        // A dark picture is answered before any search for people: OpenCV was never loaded.
        let maps = try await Command.executeAsync("cat", ["/proc/\(agent.pid)/maps"]).stdout
        #expect(maps.contains("libavcodec") && !maps.contains("libopencv") && !maps.contains("libRoadVision"), "\(maps)")

        // The file ends after 14 s of frames, and with it the recording (later on a busy machine).
        #expect(await agent.wait(for: .seconds(120)) { !$0.process.isRunning }, "\(agent.stderr.suffix(3000))")
        let warned = ContinuousClock.now - firstWarning
        #expect(agent.stop() == 0, "\(agent.stderr.suffix(3000))")
        let log = agent.stderr
        #expect(agent.count("guidance: local checks on (no session)", in: log) == 1)
        #expect(log.contains("status: 서버 안내가 없어 기기가 직접 경고합니다."))
        // One warning per 4 s at most, over the time from the first one to the end (plus one for
        // the first, one for the polling's lag).
        let warnings = agent.count(warning, in: log)
        let most = Int(warned / .seconds(4)) + 2
        #expect(warnings >= 2 && warnings <= most, "\(warnings) warnings in \(warned): \(log.suffix(3000))")
        #expect(!log.contains("guidance (local): pedestrian"), "a dark road shows nobody")
        #expect(!log.contains("guidance: segment"), "no server, no server guidance")

        // What was spoken is in the folder, one Korean WAV per utterance. eSpeak-ng's Korean voice
        // says each candidate text at a length of its own (within a few samples from run to
        // run): each file is the candidate nearest its length, and the warning is among them as
        // often as it was logged (the last may be cut off by the end of the file).
        let spoken = try FileManager.default.contentsOfDirectory(atPath: files.path("speech")).sorted()
        #expect(spoken.allSatisfy { $0.hasSuffix("-ko.wav") }, "\(spoken)")
        var candidates: [String: Int] = [:]
        for finding in RoadFinding.allCases {
            candidates[finding.rawValue] = try await Self.reference(finding.text(locale: "ko-KR").text, voice: "ko")
        }
        for (name, phrases) in [
            ("ready", [StatusPhrase.ready]), ("local", [.guidanceLocal]), ("lost", [.connectionLost]),
            ("lost+local", [.connectionLost, .guidanceLocal])
        ] {
            let text = phrases.map { $0.text(language: "ko") }.joined(separator: " ")
            candidates[name] = try await Self.reference(text, voice: "ko")
        }
        let intro = StatusPhrase.guidanceLocal.text(language: "ko") + " " + RoadFinding.tooDark.text(locale: "ko-KR").text
        candidates["local+too_dark"] = try await Self.reference(intro, voice: "ko")
        let heard = try spoken.map { file in
            let count = try Self.samples(files.path("speech/\(file)")).count
            let nearest = candidates.min { abs($0.value - count) < abs($1.value - count) }!
            return abs(nearest.value - count) * 200 <= nearest.value ? nearest.key : "cut off (\(count) samples)"
        }
        // The first warning comes with the news that the device now warns by itself: one
        // utterance, or two in a row when a busy machine spoke the news before the warning came.
        let news = heard.indices.filter { heard[$0].hasPrefix("local") }
        #expect(
            news.count == 1
                && news.allSatisfy {
                    heard[$0] == "local+too_dark" || (heard[$0] == "local" && heard.dropFirst($0 + 1).first == "too_dark")
                },
            "heard \(heard); candidates \(candidates)")
        let darkWarnings = heard.filter { $0.hasSuffix("too_dark") }.count
        #expect(darkWarnings >= 2 && darkWarnings <= warnings, "heard \(heard); candidates \(candidates)")
    }
}
