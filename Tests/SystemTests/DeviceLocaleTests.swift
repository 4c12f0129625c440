import Agent
import ConfigSupport
import Foundation
import Logging
import TestSupport
import Testing

/// One device language: the real agent and server, and the agent's voice in this process.
@Suite struct DeviceLocaleTests {
    /// How the language is set, and the process locale the agent runs under.
    struct Setup: Sendable, CustomTestStringConvertible {
        var yaml: String
        var environment: [String: String]
        var notice: String?
        var testDescription: String { yaml.isEmpty ? "LANG=\(environment["LANG"] ?? "")" : yaml.replacingOccurrences(of: "\n", with: " ") }
    }

    static let setups = [
        // The issue: a Korean device in an English process locale.
        Setup(yaml: "device:\n  locale: ko-KR\n", environment: ["LANG": "en_US.UTF-8"]),
        // No key: the process locale.
        Setup(yaml: "", environment: ["LANG": "ko_KR.UTF-8"]),
        // The old name the demo used.
        Setup(
            yaml: "uplink:\n  locale: ko-KR\n", environment: ["LANG": "en_US.UTF-8"],
            notice: "config: uplink.locale is deprecated; use device.locale: ko-KR")
    ]

    /// The agent streams two segments to the reference server, whose guidance carries no `lang`:
    /// the server answers in the `hello` locale. Everything the device says must then be Korean.
    /// Guidance is kept for 2 minutes: on a busy machine the first answer can come after the
    /// default 10 s, and a dropped one says nothing of its language (the age rule has its own tests).
    @Test(.timeLimit(.minutes(10)), arguments: setups)
    func theHelloTheGuidanceAndTheStatusPhrasesShareTheDeviceLanguage(setup: Setup) async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("script.yaml", "- text: \"속도를 줄이세요.\"\n- clear: true\n")
        let (server, port) = try await files.startServer()
        defer { server.stop() }
        // `uplink:` from the setup is merged into the one uplink section.
        let uplinkExtra =
            setup.yaml.hasPrefix("uplink:") ? setup.yaml.split(separator: "\n").dropFirst().joined(separator: "\n") + "\n" : ""
        try files.write(
            "agent.yaml",
            (setup.yaml.hasPrefix("uplink:") ? "" : setup.yaml) + """
                \(LoopFiles.testPattern(segmentSeconds: 1))
                recording:
                  dir: \(files.path("segments"))
                uplink:
                  url: ws://127.0.0.1:\(port)/v1/stream
                  allowInsecure: true
                  tokenFile: \(files.path("token"))
                  deviceId: loop-car

                """ + uplinkExtra + """
                    speech:
                      sink: wav:\(files.path("speech"))
                    haptics:
                      required: false
                    status:
                      socket: \(files.path("status.sock"))
                    guidance:
                      maxAgeMs: 120000

                    """)
        // Only the variables of the setup decide the process locale.
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("LC_") && !$0.key.hasPrefix("DASHCAM_") }
        environment.merge(setup.environment) { $1 }
        let run = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["record", "--config", files.path("agent.yaml"), "--segments", "2"], environment: environment)
        #expect(run.status == 0, "\(run.stderr.suffix(3000))")

        #expect(server.stderr.contains(#"locale="ko-KR""#), "hello: \(server.stderr.suffix(2000))")
        #expect(run.stderr.contains("status: 블랙박스가 준비되었습니다."), "\(run.stderr.suffix(3000))")
        #expect(run.stderr.contains("guidance: segment 0: 속도를 줄이세요."))
        #expect(run.stderr.contains("locale ko-KR is spoken by the eSpeak-ng voice 'ko'"))
        let spoken = try FileManager.default.contentsOfDirectory(atPath: files.path("speech")).sorted()
        #expect(spoken.count >= 2, "status and guidance: \(spoken)")
        #expect(spoken.allSatisfy { $0.hasSuffix("-ko.wav") }, "\(spoken)")
        if let notice = setup.notice {
            #expect(run.stderr.contains(notice))
        } else {
            #expect(!run.stderr.contains("deprecated"))
        }
    }

    /// A language that is no tag, and two keys that name different languages: exit 78, naming the
    /// key, the value and what is allowed.
    @Test(arguments: [
        (
            "device:\n  locale: korean\ncamera:\n  source: test-pattern\n",
            "device.locale: 'korean' is not allowed; expected a BCP 47 language tag such as ko-KR"
        ),
        (
            "device:\n  locale: ko-KR\ncamera:\n  source: test-pattern\nspeech:\n  locale: en-US\n",
            "speech.locale: 'en-US' is not allowed; expected unset or ko-KR, as device.locale says"
        )
    ])
    func aBadLocaleStopsTheAgentWithExit78(yaml: String, message: String) async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("agent.yaml", yaml)
        let run = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("dashcam-agent").path,
            ["record", "--config", files.path("agent.yaml"), "--segments", "1", "--out", files.path("segments")])
        #expect(run.status == 78)
        #expect(run.stderr.contains(message), "\(run.stderr)")
    }

    /// In process, with the real eSpeak-ng: the voice, its status texts and the hello's locale
    /// all come from `device.locale`.
    @Test func theVoiceMadeFromTheConfigSpeaksKorean() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("agent.yaml", "device:\n  locale: ko-KR\nspeech:\n  sink: wav:\(files.path("speech"))\n")
        let config = try await AgentConfig.load(file: files.path("agent.yaml"), environment: ["LANG": "en_US.UTF-8"])
        let voice = config.makeVoice(logger: Logger(label: "device-locale-tests"))
        defer { voice.close() }
        #expect(voice.deviceLocale == "ko-KR")
        #expect(voice.voice(for: voice.deviceLocale).voice == "ko")
        #expect(voice.statusText([.ready, .usageRemaining(minutes: 43)]) == "블랙박스가 준비되었습니다. 안내 시간이 43분 남았습니다.")
        voice.announce([.connected])
        await voice.waitUntilIdle()
        #expect(try FileManager.default.contentsOfDirectory(atPath: files.path("speech")) == ["000001-ko.wav"])
    }
}
