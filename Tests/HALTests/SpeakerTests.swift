import Foundation
import HAL
import Logging
import Synchronization
import TestSupport
import Testing

/// Speaks `NAME/MILLISECONDS`: every sample of the utterance is the code of NAME's first
/// character, so a sink can tell utterances apart. `FAIL` throws. The samples come in blocks of
/// 50 ms, as eSpeak-ng makes them.
struct FakeSynthesizer: SpeechSynthesizer {
    struct Failure: Error {}
    let sampleRate = 8000

    func start(text: String, voice: String) throws -> FakeStream {
        guard text != "FAIL", let slash = text.firstIndex(of: "/"), let ms = Int(text[text.index(after: slash)...]),
            let code = text.unicodeScalars.first?.value
        else { throw Failure() }
        return FakeStream(voice: voice, samples: Array(repeating: Int16(code), count: Self.samples(ms: ms)))
    }

    static func samples(ms: Int) -> Int { ms * 8000 / 1000 }
}

/// Hands out its samples block by block; with a gate, each block after the first waits until the
/// test opens it, so a test can look at the sink while the rest is still "being synthesized".
final class FakeStream: SpeechStream, @unchecked Sendable {
    let voice: String
    let voiceError: SpeechError? = nil
    private let samples: [Int16]
    private let state = NSCondition()
    private var offset = 0
    private var gated: Bool
    private(set) var cancelled = false

    init(voice: String, samples: [Int16], gated: Bool = false) {
        self.voice = voice
        self.samples = samples
        self.gated = gated
    }

    func next() throws -> [Int16]? {
        state.lock()
        defer { state.unlock() }
        while gated, offset > 0, !cancelled { state.wait() }
        guard !cancelled, offset < samples.count else { return nil }
        let end = min(offset + 400, samples.count)
        defer { offset = end }
        return Array(samples[offset..<end])
    }

    func cancel() {
        state.lock()
        cancelled = true
        state.broadcast()
        state.unlock()
    }

    /// Lets the remaining blocks through.
    func open() {
        state.lock()
        gated = false
        state.broadcast()
        state.unlock()
    }

    /// Samples handed out so far; all of them once synthesis has ended.
    var made: Int {
        state.lock()
        defer { state.unlock() }
        return offset
    }

    var total: Int { samples.count }
}

/// A ``FakeSynthesizer`` whose streams are gated (see ``FakeStream``); the test reaches them here.
final class GatedSynthesizer: SpeechSynthesizer, @unchecked Sendable {
    let sampleRate = 8000
    private let lock = NSLock()
    private var made: [FakeStream] = []

    func start(text: String, voice: String) throws -> FakeStream {
        let plain = try FakeSynthesizer().start(text: text, voice: voice)
        var samples: [Int16] = []
        while let block = try plain.next() { samples += block }
        let stream = FakeStream(voice: voice, samples: samples, gated: true)
        lock.withLock { made.append(stream) }
        return stream
    }

    var streams: [FakeStream] { lock.withLock { made } }
}

/// Records every call with its time, and plays in real time: a write takes as long as its samples.
/// ``hold()`` makes the next write wait for ``release()``, so a test can act while an utterance is
/// surely playing, however slowly the test itself gets scheduled.
final class FakeSink: AudioSink, @unchecked Sendable {
    enum Call: Equatable {
        case open(Int)
        case begin(String)
        case write(Int16, count: Int)
        case drain
        case stop
        case close
    }

    struct Event {
        var call: Call
        var at: ContinuousClock.Instant
    }

    private let events = Mutex<[Event]>([])
    private let rate = Mutex(8000)
    private let gate = NSCondition()
    private var holding = false
    private var held = false

    let name = "fake"

    func open(sampleRate: Int) throws {
        rate.withLock { $0 = sampleRate }
        record(.open(sampleRate))
    }

    func begin(voice: String) throws { record(.begin(voice)) }

    func write(_ samples: ArraySlice<Int16>) throws {
        #expect(Set(samples).count == 1, "one write, one utterance")
        record(.write(samples.first ?? 0, count: samples.count))
        gate.lock()
        if holding {
            held = true
            while holding { gate.wait() }
            held = false
        }
        gate.unlock()
        let rate = rate.withLock { $0 }
        usleep(UInt32(samples.count * 1_000_000 / rate))
    }

    func drain() throws { record(.drain) }
    func stop() { record(.stop) }
    func close() { record(.close) }

    func hold() {
        gate.lock()
        holding = true
        gate.unlock()
    }

    /// A write is waiting for ``release()``.
    var isHeld: Bool {
        gate.lock()
        defer { gate.unlock() }
        return held
    }

    func release() {
        gate.lock()
        holding = false
        gate.broadcast()
        gate.unlock()
    }

    var log: [Event] { events.withLock { $0 } }
    var calls: [Call] { log.map(\.call) }

    /// The calls with consecutive writes of one utterance merged: `["begin en", "write A", "drain"]`.
    var script: [String] {
        var lines: [String] = []
        for call in calls {
            let line: String
            switch call {
            case .open: continue
            case .begin(let voice): line = "begin \(voice)"
            case .write(let value, _): line = "write \(Character(UnicodeScalar(UInt16(value))!))"
            case .drain: line = "drain"
            case .stop: line = "stop"
            case .close: line = "close"
            }
            if line != lines.last || !line.hasPrefix("write") { lines.append(line) }
        }
        return lines
    }

    func samplesWritten(of name: Character) -> Int {
        let code = Int16(name.unicodeScalars.first!.value)
        return calls.reduce(0) { total, call in
            if case .write(code, let count) = call { return total + count }
            return total
        }
    }

    func firstTime(of wanted: Call) -> ContinuousClock.Instant? {
        log.first { $0.call == wanted }?.at
    }

    private func record(_ call: Call) {
        events.withLock { $0.append(Event(call: call, at: .now)) }
    }
}

@Suite(.timeLimit(.minutes(10))) struct SpeakerTests {
    let logger = Logger(label: "speaker-tests")

    @Test func anUrgentMessageCutsOffWhatIsPlayingAndPlaysNext() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        // Ten minutes: an A that was not cut would keep the test waiting, not pass it.
        speaker.say(text: "A/600000", voice: "en")
        #expect(await eventually { sink.samplesWritten(of: "A") > 0 })
        let urgentAt = ContinuousClock.now
        speaker.say(text: "B/300", voice: "ko", urgent: true, receivedAt: urgentAt)
        await speaker.waitUntilIdle()

        #expect(sink.script == ["begin en", "write A", "stop", "begin ko", "write B", "drain"])
        // A was cut: far from all of it written. B played whole.
        #expect(sink.samplesWritten(of: "A") < FakeSynthesizer.samples(ms: 600_000))
        #expect(sink.samplesWritten(of: "B") == FakeSynthesizer.samples(ms: 300))
        let stoppedAt = try #require(sink.firstTime(of: .stop))
        #expect(stoppedAt >= urgentAt)
        #expect(speaker.stats.spoken == 1)
        #expect(speaker.stats.cutOff == 1)
        #expect(speaker.stats.replaced == 0)
        #expect(speaker.recentLatencies.count == 2)
        // B's latency counts from its receipt, A's cut included.
        #expect(try #require(speaker.recentLatencies.last) >= urgentAt.duration(to: stoppedAt))
    }

    @Test func nothingOfTheCutUtteranceIsWrittenAfterTheBlockInHand() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        sink.hold()
        speaker.say(text: "A/1000", voice: "en")
        #expect(await eventually { sink.isHeld })
        speaker.say(text: "B/100", voice: "en", urgent: true)
        sink.release()
        await speaker.waitUntilIdle()
        #expect(sink.script == ["begin en", "write A", "stop", "begin en", "write B", "drain"])
        // 20 ms blocks at 8 kHz: the one block being played when B came, and no more.
        #expect(sink.samplesWritten(of: "A") == 160)
        #expect(speaker.stats.cutOff == 1)
    }

    @Test func aNormalMessageWaitsForTheCurrentUtteranceToFinish() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        sink.hold()
        speaker.say(text: "A/500", voice: "en")
        #expect(await eventually { sink.isHeld })
        speaker.say(text: "B/200", voice: "en")
        sink.release()
        await speaker.waitUntilIdle()

        #expect(sink.script == ["begin en", "write A", "drain", "begin en", "write B", "drain"])
        #expect(sink.samplesWritten(of: "A") == FakeSynthesizer.samples(ms: 500))
        #expect(sink.samplesWritten(of: "B") == FakeSynthesizer.samples(ms: 200))
        #expect(
            speaker.stats
                == {
                    var stats = Speaker.Stats(); stats.spoken = 2; return stats
                }())
    }

    @Test func aNewerNormalMessageReplacesOneThatHasNotStarted() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        sink.hold()
        speaker.say(text: "A/600", voice: "en")
        #expect(await eventually { sink.isHeld })
        speaker.say(text: "B/200", voice: "en")
        speaker.say(text: "C/200", voice: "en")
        sink.release()
        await speaker.waitUntilIdle()

        #expect(sink.script == ["begin en", "write A", "drain", "begin en", "write C", "drain"])
        #expect(sink.samplesWritten(of: "B") == 0)
        #expect(speaker.stats.spoken == 2)
        #expect(speaker.stats.replaced == 1)
    }

    @Test func aStatusToKeepIsSpokenAfterTheGuidanceThatCameWhileItWaited() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        sink.hold()
        speaker.say(text: "A/600", voice: "en")
        #expect(await eventually { sink.isHeld })
        speaker.say(text: "S/200", voice: "en", keep: true)
        speaker.say(text: "B/200", voice: "en")
        speaker.say(text: "C/200", voice: "en")
        sink.release()
        await speaker.waitUntilIdle()

        #expect(sink.script == ["begin en", "write A", "drain", "begin en", "write C", "drain", "begin en", "write S", "drain"])
        #expect(sink.samplesWritten(of: "S") == FakeSynthesizer.samples(ms: 200))
        #expect(speaker.stats.spoken == 3)
        #expect(speaker.stats.replaced == 1, "B only")
    }

    @Test func utterancesNeverInterleaveAndNewerOnesComeLater() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        let names = (0..<30).map { Character(UnicodeScalar(UInt8(ascii: "A") + UInt8($0))) }
        for (index, name) in names.enumerated() {
            speaker.say(text: "\(name)/\(60 + index % 4 * 40)", voice: "en", urgent: index % 3 == 0)
            try await Task.sleep(for: .milliseconds(index % 5 * 15))
        }
        await speaker.waitUntilIdle()

        // Every utterance is begin, one run of its own samples, then drain or stop.
        var runs: [Character] = []
        var script = sink.script[...]
        while let begin = script.popFirst() {
            #expect(begin == "begin en")
            let write = script.popFirst() ?? ""
            #expect(write.hasPrefix("write "))
            let name = try #require(write.last)
            let end = script.popFirst()
            #expect(end == "drain" || end == "stop")
            if end == "drain" {
                let ms = 60 + names.firstIndex(of: name)! % 4 * 40
                #expect(sink.samplesWritten(of: name) == FakeSynthesizer.samples(ms: ms))
            }
            runs.append(name)
        }
        #expect(runs == runs.sorted(), "newer guidance is never spoken before older")
        #expect(Set(runs).count == runs.count, "no utterance resumes after another")
        #expect(runs.last == names.last)
        let stats = speaker.stats
        #expect(stats.spoken + stats.cutOff + stats.replaced + stats.failures == names.count)
        #expect(stats.spoken == sink.calls.filter { $0 == .drain }.count)
    }

    @Test func anUrgentMessageWhileIdleIsSimplySpoken() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        speaker.say(text: "U/100", voice: "en", urgent: true)
        await speaker.waitUntilIdle()
        #expect(sink.script == ["begin en", "write U", "drain"])
        #expect(speaker.stats.spoken == 1)
    }

    @Test func emptyTextIsIgnored() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        speaker.say(text: "", voice: "en", urgent: true)
        speaker.say(text: " \n\t", voice: "en")
        await speaker.waitUntilIdle()
        #expect(sink.calls == [.open(8000)])
        #expect(speaker.stats == Speaker.Stats())
    }

    @Test func aFailedSynthesisIsCountedAndTheNextMessageIsSpoken() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        speaker.say(text: "FAIL", voice: "en")
        await speaker.waitUntilIdle()
        speaker.say(text: "A/100", voice: "en")
        await speaker.waitUntilIdle()
        #expect(sink.script == ["begin en", "write A", "drain"])
        #expect(speaker.stats.failures == 1)
        #expect(speaker.stats.spoken == 1)
    }

    @Test func latenciesAreMeasuredFromReceiptToTheFirstSampleAndTheLatestAreKept() async throws {
        let sink = FakeSink()
        let reported = Mutex<[Duration]>([])
        let options = Speaker.Options(latencyHistory: 2, onFirstSample: { latency in reported.withLock { $0.append(latency) } })
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger, options: options)
        // Received half a second before it was handed over: the latency includes that.
        speaker.say(text: "A/50", voice: "en", receivedAt: .now - .milliseconds(500))
        await speaker.waitUntilIdle()
        speaker.say(text: "B/50", voice: "en")
        await speaker.waitUntilIdle()
        speaker.say(text: "C/50", voice: "en")
        await speaker.waitUntilIdle()

        let all = reported.withLock { $0 }
        #expect(all.count == 3)
        #expect(all[0] >= .milliseconds(500))
        #expect(all[1] >= .zero && all[2] >= .zero)
        #expect(speaker.recentLatencies == Array(all.suffix(2)))
    }

    /// The speaker writes the first block while the synthesizer still holds back the rest: it
    /// does not wait for the whole sentence.
    @Test func theFirstBlockIsPlayedWhileTheRestIsStillBeingSynthesized() async throws {
        let sink = FakeSink()
        let synthesizer = GatedSynthesizer()
        let speaker = try Speaker(synthesizer: synthesizer, sink: sink, logger: logger)
        speaker.say(text: "A/2000", voice: "en")
        let firstWritten = await eventually { sink.samplesWritten(of: "A") > 0 }
        let stream = try #require(synthesizer.streams.first)
        // The gate was still shut: one block of 2000 ms made, the rest not.
        #expect(stream.made == 400 && stream.made < stream.total)
        stream.open()
        #expect(firstWritten, "nothing reached the sink before synthesis ended")
        await speaker.waitUntilIdle()
        #expect(sink.script == ["begin en", "write A", "drain"])
        #expect(sink.samplesWritten(of: "A") == FakeSynthesizer.samples(ms: 2000))
        #expect(speaker.stats.spoken == 1)
        #expect(speaker.recentLatencies.count == 1)
    }

    /// An urgent message cancels the stream it cuts off: the synthesizer is told to stop, and
    /// what it had not made is never made.
    @Test func cuttingOffAnUtteranceStopsItsSynthesis() async throws {
        let sink = FakeSink()
        let synthesizer = GatedSynthesizer()
        let speaker = try Speaker(synthesizer: synthesizer, sink: sink, logger: logger)
        speaker.say(text: "A/5000", voice: "en")
        #expect(await eventually { sink.samplesWritten(of: "A") > 0 })
        speaker.say(text: "B/100", voice: "ko", urgent: true)
        // Let A's blocks flow again: the speaker takes at most one more before it sees the cut.
        let first = try #require(synthesizer.streams.first)
        first.open()
        #expect(await eventually { synthesizer.streams.count == 2 })
        synthesizer.streams.last?.open()
        await speaker.waitUntilIdle()
        #expect(first.cancelled)
        #expect(first.made < first.total, "A was synthesized to its end: \(first.made) of \(first.total)")
        #expect(sink.script == ["begin en", "write A", "stop", "begin ko", "write B", "drain"])
        #expect(speaker.stats.cutOff == 1 && speaker.stats.spoken == 1)
    }

    @Test func closingCutsOffAndClosesTheSink() async throws {
        let sink = FakeSink()
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: sink, logger: logger)
        // Ten minutes: a close that let A play out would keep the test waiting, not pass it.
        speaker.say(text: "A/600000", voice: "en")
        #expect(await eventually { sink.samplesWritten(of: "A") > 0 })
        speaker.close()
        #expect(sink.script == ["begin en", "write A", "stop", "close"])
        speaker.say(text: "B/100", voice: "en")
        await speaker.waitUntilIdle()
        #expect(sink.samplesWritten(of: "B") == 0)
    }
}
