internal import FileSupport
internal import Foundation
internal import Glibc

/// One WAV file per utterance in a folder, for tests and demonstrations without a sound card.
///
/// Files are named by a six-digit sequence number and the voice, `000003-ko.wav`, numbered on
/// from the highest number already in the folder. Each is 16-bit mono PCM at the synthesizer's
/// rate, written to a temporary file and renamed into place (``DurableFileWriter``), so a file
/// that exists is complete. An utterance cut off by ``stop()`` is saved with what had been "played" of it.
///
/// With `realtime`, ``write(_:)`` takes as long as the samples would take to play, so a
/// ``Speaker`` in front of it cuts off and replaces utterances as it would with a loudspeaker;
/// without, the sink takes everything at once.
public final class WAVFileSink: AudioSink {
    public let directory: String
    public let realtime: Bool
    private var sampleRate = 0
    private var sequence = 0
    private var voice = ""
    private var samples: [Int16] = []
    private var started: ContinuousClock.Instant?

    public init(directory: String, realtime: Bool = true) {
        self.directory = directory
        self.realtime = realtime
    }

    public var name: String { "wav:\(directory)" }

    public func open(sampleRate: Int) throws {
        self.sampleRate = sampleRate
        let names: [String]
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw AudioSinkError.directory(directory, Self.reason(error))
        }
        guard access(directory, W_OK) == 0 else {
            throw AudioSinkError.directory(directory, AudioSinkError.text(errno: errno))
        }
        sequence = names.compactMap(Self.sequenceNumber(of:)).max() ?? 0
    }

    public func begin(voice: String) throws {
        self.voice = voice
        samples.removeAll(keepingCapacity: true)
        started = nil
    }

    public func write(_ samples: ArraySlice<Int16>) throws {
        let start = started ?? ContinuousClock.now
        started = start
        self.samples.append(contentsOf: samples)
        if realtime, sampleRate > 0 {
            let played = Duration.nanoseconds(Int64(self.samples.count) * 1_000_000_000 / Int64(sampleRate))
            Self.sleep(until: start + played)
        }
    }

    public func drain() throws {
        try save()
    }

    public func stop() {
        // What was cut off still shows what was heard; a failure here has no one to report to
        // but the next utterance, which will meet the same folder.
        try? save()
    }

    public func close() {
        samples = []
    }

    /// The file name of utterance number `sequence` spoken by `voice`.
    static func fileName(sequence: Int, voice: String) -> String {
        let digits = String(sequence)
        let number = String(repeating: "0", count: max(0, 6 - digits.count)) + digits
        // A voice name is not trusted as a path: `/` and `..` must not leave the folder.
        let safe = String(voice.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") ? $0 : "_" })
        return "\(number)-\(safe.isEmpty ? "_" : safe).wav"
    }

    /// A RIFF/WAVE header for `dataBytes` bytes of 16-bit mono PCM at `sampleRate`.
    static func header(sampleRate: Int, dataBytes: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(44)
        func append(_ text: String) { bytes.append(contentsOf: text.utf8) }
        func append32(_ value: Int) {
            withUnsafeBytes(of: UInt32(truncatingIfNeeded: value).littleEndian) { bytes.append(contentsOf: $0) }
        }
        func append16(_ value: Int) {
            withUnsafeBytes(of: UInt16(truncatingIfNeeded: value).littleEndian) { bytes.append(contentsOf: $0) }
        }
        append("RIFF")
        append32(36 + dataBytes)
        append("WAVE")
        append("fmt ")
        append32(16)
        append16(1)  // PCM
        append16(1)  // channels
        append32(sampleRate)
        append32(sampleRate * 2)  // bytes per second
        append16(2)  // bytes per frame
        append16(16)  // bits per sample
        append("data")
        append32(dataBytes)
        return bytes
    }

    private func save() throws {
        guard !samples.isEmpty else { return }
        defer { samples.removeAll(keepingCapacity: true) }
        sequence += 1
        let name = Self.fileName(sequence: sequence, voice: voice)
        let path = directory + "/" + name
        let temporary = directory + "/." + name + ".tmp"
        var data = Self.header(sampleRate: sampleRate, dataBytes: samples.count * 2)
        data.reserveCapacity(data.count + samples.count * 2)
        for sample in samples {
            withUnsafeBytes(of: sample.littleEndian) { data.append(contentsOf: $0) }
        }
        do {
            try DurableFileWriter.write(data, to: path, temporary: temporary)
        } catch {
            throw AudioSinkError.file(error.path, error.code.map { AudioSinkError.text(errno: $0) } ?? error.reason)
        }
    }

    private static func sequenceNumber(of fileName: String) -> Int? {
        guard fileName.hasSuffix(".wav") else { return nil }
        let digits = fileName.prefix { $0.isASCII && $0.isNumber }
        guard digits.count >= 6, fileName.dropFirst(digits.count).first == "-" else { return nil }
        return Int(digits)
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? CocoaError, let underlying = error.userInfo[NSUnderlyingErrorKey] as? POSIXError {
            return AudioSinkError.text(errno: underlying.code.rawValue)
        }
        return "\(error)"
    }

    private static func sleep(until deadline: ContinuousClock.Instant) {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { return }
        let (seconds, attoseconds) = remaining.components
        _ = usleep(useconds_t(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
    }
}
