@testable import Agent
import Foundation
import GuidanceProtocol
import HAL
import Logging
import Synchronization
import Testing

/// What an announcer said, utterance by utterance.
final class Heard: Sendable {
    let phrases = Mutex<[[StatusPhrase]]>([])
    var all: [StatusPhrase] { phrases.withLock { $0.flatMap { $0 } } }
    var utterances: [[StatusPhrase]] { phrases.withLock { $0 } }

    /// Returns once `count` phrases were said; fails the test after 30 s (a whole test run
    /// starting at once on two cores has held a 30 ms timer back for over 10 s).
    func wait(for count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while all.count < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(all.count >= count, "heard \(all), waited for \(count)")
    }
}

/// A line that remembers every level it was driven to.
final class RecordingLine: HapticLine {
    let levels = Mutex<[Bool]>([])
    let released = Mutex(false)
    var description: String { "recording line" }

    func setActive(_ active: Bool) throws { levels.withLock { $0.append(active) } }
    func release() { released.withLock { $0 = true } }
    var pulses: Int { levels.withLock { $0.filter { $0 }.count } }
}

/// Guidance from the wire to the speaker (real eSpeak-ng, WAV files) and the motor (a recording line).
@Suite struct GuidanceRouterTests {
    static let logger = Logger(label: "router-test")

    struct Loop {
        let folder: URL
        let line = RecordingLine()
        let router: GuidanceRouter
        let spoken = Heard()

        init(deviceLocale: String = "ko-KR") throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("router-\(UUID().uuidString)")
            let synthesizer = try EspeakSynthesizer(logger: GuidanceRouterTests.logger)
            let speaker = try Speaker(
                synthesizer: synthesizer, sink: WAVFileSink(directory: folder.path, realtime: false),
                logger: GuidanceRouterTests.logger)
            let voice = DeviceVoice(
                deviceLocale: deviceLocale, speaker: speaker, output: "wav:\(folder.path)",
                voices: VoiceMap(available: VoiceMap.voiceNames(identifiers: synthesizer.voiceIdentifiers())),
                logger: GuidanceRouterTests.logger)
            let spoken = self.spoken
            let announcer = StatusAnnouncer(gather: .milliseconds(1)) { phrases in spoken.phrases.withLock { $0.append(phrases) } }
            let board = StatusBoard(
                AgentStatus(
                    camera: .init(source: "test", format: "320x180", fps: 10, state: "recording"), encoder: "libx265",
                    speech: .init(output: voice.output, locale: deviceLocale), haptics: .init(line: "recording line", released: false)))
            router = GuidanceRouter(
                voice: voice, haptics: try Haptics(line: line, logger: GuidanceRouterTests.logger),
                clear: .clear, alert: .alert, announcer: announcer, board: board, logger: GuidanceRouterTests.logger)
        }

        var files: [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".wav") }.sorted()
        }

        func waitForPulses(_ count: Int) async throws {
            for _ in 0..<1000 where line.pulses < count { try await Task.sleep(for: .milliseconds(10)) }
        }

        func close() {
            router.voice.close()
            router.haptics.close()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    @Test func clearVibratesOnceAndSaysNothing() async throws {
        let loop = try Loop()
        defer { loop.close() }
        await loop.router.route(.guidance(.init(seq: 1, text: "", lang: nil, clear: true, priority: .normal)))
        try await loop.waitForPulses(1)
        await loop.router.voice.waitUntilIdle()
        try await Task.sleep(for: .milliseconds(300))
        #expect(loop.line.pulses == 1)
        #expect(loop.files.isEmpty)
        #expect(loop.router.board.current.lastGuidance?.clear == true)
    }

    @Test func guidanceIsSpokenInItsOwnLanguageElseTheDevicesAndUrgentAlsoBuzzes() async throws {
        let loop = try Loop(deviceLocale: "ko-KR")
        defer { loop.close() }
        await loop.router.route(.guidance(.init(seq: 1, text: "The car ahead is braking.", lang: "en-US", clear: false, priority: .normal)))
        await loop.router.voice.waitUntilIdle()
        await loop.router.route(.guidance(.init(seq: 2, text: "보행자가 있습니다", lang: nil, clear: false, priority: .urgent)))
        await loop.router.voice.waitUntilIdle()
        try await loop.waitForPulses(3)
        #expect(loop.files == ["000001-en-us.wav", "000002-ko.wav"])
        #expect(loop.line.pulses == 3, "urgent guidance plays the three-pulse alert")
        #expect(loop.router.board.current.lastGuidance?.priority == "urgent")
    }

    @Test func usageFromTheServerReachesTheAnnouncer() async throws {
        let loop = try Loop()
        defer { loop.close() }
        await loop.router.route(.welcome(session: "s1", remainingSeconds: 43 * 60 + 10))
        await loop.router.route(.usage(remainingSeconds: 540))
        await loop.router.route(.error(code: .quotaExhausted, message: "no more", seq: nil))
        try await loop.spoken.wait(for: 3)
        #expect(loop.spoken.all == [.usageRemaining(minutes: 43), .usageLow(minutes: 9), .usageExhausted])
        #expect(loop.router.board.current.remainingSeconds == 540)
    }

    /// While the server's model service is down every segment gets `guidance_unavailable`; the
    /// driver hears it once, and once more only after guidance came back in between.
    @Test func guidanceUnavailableIsSpokenOncePerOutageNotPerSegment() async throws {
        let loop = try Loop()
        defer { loop.close() }
        for seq in 0..<6 {
            await loop.router.route(.error(code: .guidanceUnavailable, message: "gemini is not answering", seq: seq))
        }
        try await loop.spoken.wait(for: 1)
        await loop.router.route(.guidance(.init(seq: 6, text: "", lang: nil, clear: true, priority: .normal)))
        for seq in 7..<10 {
            await loop.router.route(.error(code: .guidanceUnavailable, message: "gemini is not answering", seq: seq))
        }
        try await loop.spoken.wait(for: 2)
        try await Task.sleep(for: .milliseconds(300))
        #expect(loop.spoken.all == [.guidanceUnavailable, .guidanceUnavailable])
        #expect(StatusPhrase.guidanceUnavailable.text(language: "ko") == "지금은 안내를 받을 수 없습니다. 녹화는 계속됩니다.")
    }
}
