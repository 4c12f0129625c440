import Foundation
import HAL
import Logging
import Testing

@Suite struct AudioSinkSpecTests {
    @Test func alsaAloneIsTheDefaultDevice() throws {
        #expect(try AudioSinkSpec(parsing: "alsa") == .alsa(device: "default"))
    }

    @Test func everythingAfterTheFirstColonIsTheDeviceOrFolder() throws {
        #expect(try AudioSinkSpec(parsing: "alsa:hw:1,0") == .alsa(device: "hw:1,0"))
        #expect(try AudioSinkSpec(parsing: "alsa:plughw:CARD=Loopback,DEV=0") == .alsa(device: "plughw:CARD=Loopback,DEV=0"))
        #expect(try AudioSinkSpec(parsing: "wav:out/speech") == .wav(directory: "out/speech"))
        #expect(AudioSinkSpec.alsa(device: "hw:1,0").description == "alsa:hw:1,0")
    }

    @Test(arguments: ["", "alsa:", "wav", "wav:", "pulse", "pulse:default", "ALSA", " alsa"])
    func anythingElseIsAnErrorNamingTheValueAndWhatIsAllowed(_ text: String) {
        #expect {
            _ = try AudioSinkSpec(parsing: text)
        } throws: { error in
            guard let error = error as? AudioSinkError else { return false }
            let description = "\(error)"
            return error.isInvalidSpec && description.contains("'\(text)'") && description.contains("alsa:DEVICE")
                && description.contains("wav:DIRECTORY")
        }
    }
}

@Suite struct ALSASinkTests {
    @Test(arguments: ["dashcam_no_such_pcm", "hw:97,0"])
    func aDeviceThatDoesNotExistIsAnErrorNamingIt(_ device: String) {
        let sink = ALSASink(device: device)
        #expect {
            try sink.open(sampleRate: 22_050)
        } throws: { error in
            "\(error)".contains("'\(device)'")
        }
    }

    @Test func anUnknownPCMNameIsNotFound() throws {
        let error = try #require(throws: AudioSinkError.self) {
            try ALSASink(device: "dashcam_no_such_pcm").open(sampleRate: 22_050)
        }
        #expect(error.isNotFound)
        #expect(error.subject == "dashcam_no_such_pcm")
    }

    /// alsa-lib's `null` device takes everything at once and plays nothing; no sound card needed.
    @Test func theNullDeviceTakesUtterancesDrainedAndDropped() throws {
        let sink = ALSASink(device: "null")
        try sink.open(sampleRate: 22_050)
        for cutOff in [false, true, false] {
            try sink.begin(voice: "en")
            for _ in 0..<10 { try sink.write(ArraySlice(repeating: 100, count: 441)) }
            if cutOff { sink.stop() } else { try sink.drain() }
        }
        sink.close()
        sink.close()
    }

    @Test func aSpeakerPlaysToTheNullDevice() async throws {
        let speaker = try Speaker(synthesizer: FakeSynthesizer(), sink: ALSASink(device: "null"),
                                  logger: Logger(label: "alsa-tests"))
        speaker.say(text: "A/200", voice: "en")
        await speaker.waitUntilIdle()
        speaker.say(text: "B/200", voice: "en")
        await speaker.waitUntilIdle()
        #expect(speaker.stats.spoken == 2)
        #expect(speaker.stats.failures == 0)
    }

    @Test func aSpeakerOnAMissingDeviceFailsToStartNamingIt() {
        #expect {
            _ = try Speaker(synthesizer: FakeSynthesizer(), sink: ALSASink(device: "dashcam_no_such_pcm"),
                            logger: Logger(label: "alsa-tests"))
        } throws: { error in
            "\(error)".contains("'dashcam_no_such_pcm'")
        }
    }
}

@Suite struct WAVFileSinkTests {
    @Test func aFileHasACorrectRIFFHeaderAndTheSamples() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let sink = WAVFileSink(directory: folder.path, realtime: false)
        try sink.open(sampleRate: 22_050)
        try sink.begin(voice: "ko")
        let samples: [Int16] = (0..<22_050).map { Int16(truncatingIfNeeded: $0 * 37) }
        try sink.write(samples[0..<10_000])
        try sink.write(samples[10_000...])
        try sink.drain()

        #expect(folder.files == ["000001-ko.wav"])
        let bytes = try folder.bytes("000001-ko.wav")
        func u32(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 24 }
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        func text(_ at: Int) -> String { String(decoding: bytes[at..<at + 4], as: UTF8.self) }
        #expect(text(0) == "RIFF" && text(8) == "WAVE" && text(12) == "fmt " && text(36) == "data")
        #expect(u32(4) == bytes.count - 8)
        #expect(u32(16) == 16 && u16(20) == 1 && u16(22) == 1)
        #expect(u32(24) == 22_050 && u32(28) == 44_100 && u16(32) == 2 && u16(34) == 16)
        #expect(u32(40) == samples.count * 2 && bytes.count == 44 + samples.count * 2)
        let decoded = stride(from: 44, to: bytes.count, by: 2).map { Int16(bitPattern: UInt16(u16($0))) }
        #expect(decoded == samples)
        let stat = try SoxStat(folder.path + "/000001-ko.wav")
        #expect(stat.sampleRate == 22_050)
        #expect(stat.seconds == 1)
    }

    @Test func numbersGoOnFromTheFilesAlreadyThereAndNoTemporaryFileStays() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        _ = FileManager.default.createFile(atPath: folder.path + "/000041-en.wav", contents: Data())
        _ = FileManager.default.createFile(atPath: folder.path + "/notes.txt", contents: Data())
        let sink = WAVFileSink(directory: folder.path, realtime: false)
        try sink.open(sampleRate: 22_050)
        for voice in ["en", "cmn-latn-pinyin", "../odd/voice"] {
            try sink.begin(voice: voice)
            try sink.write([1, 2, 3])
            try sink.drain()
        }
        #expect(folder.files == [
            "000041-en.wav", "000042-en.wav", "000043-cmn-latn-pinyin.wav", "000044-___odd_voice.wav", "notes.txt",
        ])
    }

    @Test func aCutOffUtteranceKeepsWhatWasPlayed() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let sink = WAVFileSink(directory: folder.path, realtime: false)
        try sink.open(sampleRate: 8000)
        try sink.begin(voice: "en")
        try sink.write(ArraySlice(repeating: 5, count: 800))
        sink.stop()
        try sink.begin(voice: "ko")
        sink.stop()
        #expect(folder.files == ["000001-en.wav"])
        #expect(try folder.bytes("000001-en.wav").count == 44 + 1600)
    }

    @Test func realtimeWritesTakeAsLongAsTheyWouldPlay() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let sink = WAVFileSink(directory: folder.path)
        try sink.open(sampleRate: 8000)
        try sink.begin(voice: "en")
        let start = ContinuousClock.now
        for _ in 0..<10 { try sink.write(ArraySlice(repeating: 1, count: 160)) }
        let elapsed = start.duration(to: .now)
        #expect(elapsed >= .milliseconds(190) && elapsed < .seconds(2))
    }

    @Test func aFolderThatCannotBeMadeIsAnErrorNamingIt() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let file = folder.path + "/plain-file"
        _ = FileManager.default.createFile(atPath: file, contents: Data())
        #expect {
            try WAVFileSink(directory: file + "/speech").open(sampleRate: 22_050)
        } throws: { error in
            "\(error)".contains("'\(file)/speech'")
        }
    }
}
