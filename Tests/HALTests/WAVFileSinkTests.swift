import Foundation
import HAL
import Logging
import Testing

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
        #expect(
            folder.files == [
                "000041-en.wav", "000042-en.wav", "000043-cmn-latn-pinyin.wav", "000044-___odd_voice.wav", "notes.txt"
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
        // 10 blocks of 20 ms at 8 kHz: never sooner than they would play (a busy machine only
        // makes it later, so no upper bound).
        #expect(start.duration(to: .now) >= .milliseconds(190))
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
