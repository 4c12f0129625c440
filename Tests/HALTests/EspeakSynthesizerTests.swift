import Foundation
import HAL
import Logging
import Testing

/// Real eSpeak-ng. Serialized: the voice tests depend on which voice eSpeak-ng had last.
@Suite(.serialized, .timeLimit(.minutes(2))) struct EspeakSynthesizerTests {
    static let korean = "전방 삼백 미터에 차량이 정차해 있습니다. 속도를 줄이세요."
    static let english = "Vehicle stopped three hundred meters ahead. Slow down."
    let logger = Logger(label: "espeak-tests")

    @Test func theRateIsEspeakNGsOwn() throws {
        #expect(try EspeakSynthesizer(logger: logger).sampleRate == 22_050)
    }

    @Test func koreanAndEnglishGuidanceBecomeAudibleWAVFilesOfPlausibleLength() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let speaker = try Speaker(synthesizer: EspeakSynthesizer(logger: logger),
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
        let speaker = try Speaker(synthesizer: EspeakSynthesizer(logger: logger),
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
        let expected = try texts.map { try synthesizer.synthesize(text: $0.0, voice: $0.1).count }
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
