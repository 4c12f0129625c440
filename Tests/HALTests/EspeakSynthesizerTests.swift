import Foundation
import HAL
import Logging
import Testing

/// Real eSpeak-ng. Serialized: the voice tests depend on which voice eSpeak-ng had last.
@Suite(.serialized, .timeLimit(.minutes(2))) struct EspeakSynthesizerTests {
    static let korean = "전방 삼백 미터에 차량이 정차해 있습니다. 속도를 줄이세요."
    static let english = "Vehicle stopped three hundred meters ahead. Slow down."
    /// About 15 s of speech: far more than ``EspeakSynthesizer/lookahead``.
    static let long = """
        Vehicle stopped three hundred meters ahead in the right lane. Slow down and keep to the left. \
        Road works begin after the next junction, where the speed limit drops to sixty. \
        A cyclist is riding on the shoulder; leave at least one and a half meters when you pass.
        """
    let logger = Logger(label: "espeak-tests")

    /// However long a text gets here, one utterance stops at ``EspeakSynthesizer/maxUtteranceSeconds``:
    /// a peer cannot keep the speaker talking for minutes.
    @Test func oneUtteranceStopsAtItsLongestWhateverTheText() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let speaker = try Speaker(
            synthesizer: EspeakSynthesizer(logger: logger),
            sink: WAVFileSink(directory: folder.path, realtime: false), logger: logger)
        speaker.say(text: String(repeating: Self.long + " ", count: 6), voice: "en")
        await speaker.waitUntilIdle()
        speaker.close()
        let stat = try SoxStat(folder.path + "/" + (try #require(folder.files.first)))
        // About 90 s of text; cut at the longest utterance (plus at most the block in flight).
        #expect(stat.seconds <= Double(EspeakSynthesizer.maxUtteranceSeconds) + 0.5, "\(stat.seconds) s")
        #expect(stat.seconds >= Double(EspeakSynthesizer.maxUtteranceSeconds) - 1, "\(stat.seconds) s")
    }

    @Test func theRateIsEspeakNGsOwn() throws {
        #expect(try EspeakSynthesizer(logger: logger).sampleRate == 22_050)
    }

    @Test func koreanAndEnglishGuidanceBecomeAudibleWAVFilesOfPlausibleLength() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let speaker = try Speaker(
            synthesizer: EspeakSynthesizer(logger: logger),
            sink: WAVFileSink(directory: folder.path, realtime: false), logger: logger)
        speaker.say(text: Self.korean, voice: "ko")
        await speaker.waitUntilIdle()
        speaker.say(text: Self.english, voice: "en")
        await speaker.waitUntilIdle()
        speaker.close()

        #expect(folder.files == ["000001-ko.wav", "000002-en.wav"])
        #expect(speaker.stats.spoken == 2)
        #expect(speaker.stats.voiceFallbacks == 0)
        for file in ["000001-ko.wav", "000002-en.wav"] {
            let stat = try SoxStat(folder.path + "/" + file)
            #expect(stat.sampleRate == 22_050, "\(file)")
            #expect((1.5...10).contains(stat.seconds), "\(file): \(stat.seconds) s")
            #expect(stat.maximumAmplitude > 0.2, "\(file): peak \(stat.maximumAmplitude)")
            #expect(stat.rmsAmplitude > 0.02, "\(file): RMS \(stat.rmsAmplitude)")
            // SoX reads as long a sound as the header announces and the file holds.
            let bytes = try folder.bytes(file)
            #expect(abs(Double(bytes.count - 44) / 2 / 22_050 - stat.seconds) < 0.001, "\(file)")
        }
    }

    /// eSpeak-ng's output varies by a few samples from call to call (its generators keep their
    /// phase), so voices are told apart by length: the Korean voice reads these numbers in Korean,
    /// several percent shorter than English, while one voice varies by a fraction of a percent.
    static let numbers = "120, 340, 560, 780."

    /// Which of `references` `count` is nearest to, after checking they are far enough apart to tell.
    static func nearest(_ count: Int, _ references: [String: [Int]]) throws -> String {
        let means = references.mapValues { Double($0.reduce(0, +)) / Double($0.count) }
        let (en, ko) = (try #require(means["en"]), try #require(means["ko"]))
        try #require(abs(en - ko) / en > 0.015, "the voices must differ in length to be told apart: en \(en), ko \(ko)")
        return means.min { abs($0.value - Double(count)) < abs($1.value - Double(count)) }!.key
    }

    @Test func aVoiceThatCannotBeSetFallsBackToEnglishNotToTheVoiceBefore() throws {
        let synthesizer = try EspeakSynthesizer(logger: logger)
        var references: [String: [Int]] = [:]
        for voice in ["en", "ko", "en", "ko"] {
            let synthesis = try synthesizer.render(text: Self.numbers, voice: voice)
            #expect(synthesis.voice == voice)
            #expect(synthesis.voiceError == nil)
            references[voice, default: []].append(synthesis.samples.count)
        }
        // Korean was set last: eSpeak-ng by itself would keep speaking Korean now.
        let bogus = try synthesizer.render(text: Self.numbers, voice: "xx-bogus")
        #expect(bogus.voice == "en")
        let error = try #require(bogus.voiceError)
        #expect(error.isVoiceNotFound)
        #expect(error.voice == "xx-bogus")
        #expect("\(error)".contains("'xx-bogus'") && "\(error)".contains("EE_NOT_FOUND"))
        #expect(try Self.nearest(bogus.samples.count, references) == "en")

        // A language of `espeak-ng --voices` that is no voice file fails the same way.
        _ = try synthesizer.render(text: Self.numbers, voice: "ko")
        let language = try synthesizer.render(text: Self.numbers, voice: "en-gb")
        #expect(language.voice == "en")
        #expect(language.voiceError?.voice == "en-gb")
        #expect(try Self.nearest(language.samples.count, references) == "en")
    }

    @Test func theSpeakerSpeaksAFailedVoiceInEnglishAndCountsIt() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let speaker = try Speaker(
            synthesizer: EspeakSynthesizer(logger: logger),
            sink: WAVFileSink(directory: folder.path, realtime: false), logger: logger)
        for voice in ["en", "ko", "xx-bogus"] {
            speaker.say(text: Self.numbers, voice: voice)
            await speaker.waitUntilIdle()
        }
        speaker.close()
        #expect(folder.files == ["000001-en.wav", "000002-ko.wav", "000003-en.wav"])
        let counts = try folder.files.map { try (folder.bytes($0).count - 44) / 2 }
        #expect(try Self.nearest(counts[2], ["en": [counts[0]], "ko": [counts[1]]]) == "en")
        #expect(speaker.stats.spoken == 3)
        #expect(speaker.stats.voiceFallbacks == 1)
    }

    /// The stream hands over eSpeak-ng's first block while the rest is made: eSpeak-ng runs at
    /// most `lookahead` ahead of the reader, so with one block taken it cannot have finished.
    @Test func theFirstBlockOfALongSentenceComesOutBeforeItsSynthesisEnds() throws {
        let synthesizer = try EspeakSynthesizer(logger: logger)
        let whole = try synthesizer.render(text: Self.long, voice: "en").samples.count
        let lookahead = synthesizer.sampleRate * Int(EspeakSynthesizer.lookahead.components.seconds)
        try #require(whole > 4 * lookahead, "the sentence must be far longer than the lookahead: \(whole) samples")

        let stream = try synthesizer.start(text: Self.long, voice: "en")
        let first = try #require(try stream.next())
        #expect(!first.isEmpty && first.count < lookahead)
        #expect(!stream.isFinished, "eSpeak-ng had finished the sentence before its first block was handed over")
        var count = first.count
        while let block = try stream.next() { count += block.count }
        #expect(stream.isFinished)
        #expect(abs(Double(count - whole)) / Double(whole) < 0.01, "streamed \(count) samples, rendered \(whole)")
    }

    /// A cancelled stream aborts eSpeak-ng's synthesis (the callback returns 1) instead of
    /// letting it run to the end, and frees the thread for the next utterance.
    @Test func cancellingAStreamStopsItsSynthesisAndFreesTheThread() throws {
        let synthesizer = try EspeakSynthesizer(logger: logger)
        let whole = try synthesizer.render(text: Self.long, voice: "en").samples.count
        let stream = try synthesizer.start(text: Self.long, voice: "en")
        _ = try #require(try stream.next())
        stream.cancel()
        #expect(try stream.next() == nil)
        // Jobs run one at a time: once this one is done, the cancelled one has ended.
        let after = try synthesizer.render(text: Self.numbers, voice: "ko")
        #expect(after.voice == "ko" && after.voiceError == nil && !after.samples.isEmpty)
        #expect(stream.isFinished)
        #expect(stream.samplesMade < whole / 2, "eSpeak-ng made \(stream.samplesMade) of \(whole) samples after the cancel")
    }

    /// The speaker with real eSpeak-ng: its first write to the sink comes while eSpeak-ng is
    /// still making the rest of the sentence, and the whole sentence is played.
    @Test func theSpeakerPlaysTheFirstBlockWhileEspeakNGMakesTheRest() async throws {
        let synthesizer = WatchedSynthesizer(try EspeakSynthesizer(logger: logger))
        let whole = try synthesizer.inner.render(text: Self.long, voice: "en").samples.count
        let sink = WatchingSink(synthesizer)
        let speaker = try Speaker(synthesizer: synthesizer, sink: sink, logger: logger)
        speaker.say(text: Self.long, voice: "en")
        await speaker.waitUntilIdle()
        speaker.close()
        #expect(sink.finishedAtFirstWrite == [false])
        #expect(abs(Double(sink.written - whole)) / Double(whole) < 0.01, "played \(sink.written) samples, rendered \(whole)")
        #expect(speaker.stats.spoken == 1)
    }

    @Test func theVoiceListHasKoreanEnglishAndMandarin() throws {
        let identifiers = try EspeakSynthesizer(logger: logger).voiceIdentifiers()
        #expect(identifiers.count > 50)
        let names = Set(identifiers.map { String($0.split(separator: "/").last ?? "").lowercased() })
        #expect(names.isSuperset(of: ["ko", "en", "en-us", "cmn-latn-pinyin"]))
        #expect(identifiers.contains("gmw/en"))
    }

    @Test func callsFromManyThreadsAreServedOneAtATime() throws {
        let synthesizer = try EspeakSynthesizer(logger: logger)
        let texts = [(Self.korean, "ko"), (Self.numbers, "en")]
        let expected = try texts.map { try synthesizer.render(text: $0.0, voice: $0.1).samples.count }
        let results = ResultBox(count: 16)
        DispatchQueue.concurrentPerform(iterations: 16) { index in
            let (text, voice) = texts[index % 2]
            results.set(index, try? EspeakSynthesizer(logger: logger).render(text: text, voice: voice))
        }
        for index in 0..<16 {
            let synthesis = try #require(results.get(index), "call \(index)")
            #expect(synthesis.voice == texts[index % 2].1)
            #expect(synthesis.voiceError == nil)
            let count = Double(synthesis.samples.count), reference = Double(expected[index % 2])
            #expect(abs(count - reference) / reference < 0.01, "call \(index): \(count) samples, not about \(reference)")
        }
    }
}

private final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [SpeechSynthesis?]

    init(count: Int) { values = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ value: SpeechSynthesis?) { lock.withLock { values[index] = value } }
    func get(_ index: Int) -> SpeechSynthesis? { lock.withLock { values[index] } }
}

/// eSpeak-ng, keeping the streams it starts so that a sink can look at them.
private final class WatchedSynthesizer: SpeechSynthesizer, @unchecked Sendable {
    let inner: EspeakSynthesizer
    private let lock = NSLock()
    private var last: EspeakSynthesizer.Stream?

    init(_ inner: EspeakSynthesizer) { self.inner = inner }

    var sampleRate: Int { inner.sampleRate }

    func start(text: String, voice: String) throws -> EspeakSynthesizer.Stream {
        let stream = try inner.start(text: text, voice: voice)
        lock.withLock { last = stream }
        return stream
    }

    var current: EspeakSynthesizer.Stream? { lock.withLock { last } }
}

/// Takes samples at once (no real time), noting at each utterance's first write whether
/// eSpeak-ng had already finished it.
private final class WatchingSink: AudioSink, @unchecked Sendable {
    private let synthesizer: WatchedSynthesizer
    private let lock = NSLock()
    private var first = true
    private var finished: [Bool] = []
    private var count = 0

    init(_ synthesizer: WatchedSynthesizer) { self.synthesizer = synthesizer }

    let name = "watching"
    func open(sampleRate: Int) throws {}
    func begin(voice: String) throws { lock.withLock { first = true } }

    func write(_ samples: ArraySlice<Int16>) throws {
        let isFirst = lock.withLock { () -> Bool in
            defer { first = false }
            return first
        }
        if isFirst { let done = synthesizer.current?.isFinished ?? true; lock.withLock { finished.append(done) } }
        lock.withLock { count += samples.count }
    }

    func drain() throws {}
    func stop() {}
    func close() {}

    var finishedAtFirstWrite: [Bool] { lock.withLock { finished } }
    var written: Int { lock.withLock { count } }
}
