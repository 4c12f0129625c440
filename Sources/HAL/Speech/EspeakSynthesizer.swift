internal import CEspeakNG
internal import Glibc
public import Logging

/// Speech from libespeak-ng, 16-bit mono at the rate eSpeak-ng reports (22 050 Hz).
///
/// eSpeak-ng keeps its state in globals and is not thread-safe, so every call into it, from every
/// `EspeakSynthesizer` in the process, runs on one thread of its own, one call at a time;
/// `espeak_Initialize` runs once, when the first synthesizer is made. A synthesizer is a cheap
/// handle on that thread: make as many as you like, from any thread.
///
/// - Important: `espeak_SetVoiceByName` keeps the previous voice when it fails. So the result of
///   every voice change is checked: a voice that cannot be set is reported
///   (``SpeechSynthesis/voiceError``, a warning in the log the first time) and the text is spoken
///   with ``fallbackVoice``, never silently with whatever voice spoke last.
public final class EspeakSynthesizer: SpeechSynthesizer {
    /// The voice that speaks when the one asked for cannot be set.
    public static let fallbackVoice = "en"

    public let sampleRate: Int
    private let engine: EspeakEngine
    private let logger: Logger

    /// Initializes eSpeak-ng with its default data directory if this is the first synthesizer of
    /// the process; throws if that failed (now or the first time).
    public init(logger: Logger) throws(SpeechError) {
        engine = try EspeakEngine.shared.get()
        sampleRate = engine.sampleRate
        self.logger = logger
    }

    public func synthesize(text: String, voice: String) throws(SpeechError) -> [Int16] {
        try render(text: text, voice: voice).samples
    }

    public func render(text: String, voice: String) throws(SpeechError) -> SpeechSynthesis {
        let rendered = try engine.render(text: text, voice: voice, fallback: Self.fallbackVoice).get()
        if let error = rendered.synthesis.voiceError {
            let message: Logger.Message = "speech: \(error); speaking with '\(rendered.synthesis.voice)'"
            if rendered.firstFailureOfVoice { logger.warning(message) } else { logger.debug(message) }
        }
        return rendered.synthesis
    }

    /// `espeak_VOICE.identifier` of every voice eSpeak-ng has (`gmw/en`, `ko`, `sit/cmn-Latn-pinyin`),
    /// in its order. The voice name for ``synthesize(text:voice:)`` is the last path component.
    public func voiceIdentifiers() -> [String] {
        engine.voiceIdentifiers()
    }
}

/// The one owner of eSpeak-ng's global state: a thread that makes every eSpeak-ng call.
private final class EspeakEngine: @unchecked Sendable {
    struct Rendered {
        var synthesis: SpeechSynthesis
        var firstFailureOfVoice: Bool
    }

    static let shared = Result { () throws(SpeechError) in try EspeakEngine() }

    let sampleRate: Int
    private let jobs: ConditionLock<[() -> Void]>
    // These belong to the thread.
    /// The voice eSpeak-ng has now, when known for sure.
    private var currentVoice: String?
    private var failedVoices: Set<String> = []

    private init() throws(SpeechError) {
        let jobs = ConditionLock<[() -> Void]>([])
        do {
            // Lives as long as the process: eSpeak-ng has one global state, used from this thread only.
            try NamedThread.start(name: "espeak") {
                while true {
                    let job = jobs.wait(until: { !$0.isEmpty }) { $0.removeFirst() }
                    job()
                }
            }.detach()
        } catch {
            throw .thread(error.code)
        }
        let rate = Self.run(on: jobs) { () -> Int32 in
            let rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 100, nil, espeakINITIALIZE_DONT_EXIT)
            if rate > 0 { espeak_SetSynthCallback(collectSamples) }
            return rate
        }
        guard rate > 0 else { throw .notInitialized(rate) }
        self.jobs = jobs
        self.sampleRate = Int(rate)
    }

    func render(text: String, voice: String, fallback: String) -> Result<Rendered, SpeechError> {
        Self.run(on: jobs) { self.renderOnThread(text: text, voice: voice, fallback: fallback) }
    }

    func voiceIdentifiers() -> [String] {
        Self.run(on: jobs) {
            var identifiers: [String] = []
            guard let list = espeak_ListVoices(nil) else { return identifiers }
            var index = 0
            while let voice = list[index] {
                if let identifier = voice.pointee.identifier { identifiers.append(String(cString: identifier)) }
                index += 1
            }
            // Listing reads every voice file; do not trust eSpeak-ng to have kept the voice.
            self.currentVoice = nil
            return identifiers
        }
    }

    private func renderOnThread(text: String, voice: String, fallback: String) -> Result<Rendered, SpeechError> {
        var used = voice
        var voiceError: SpeechError?
        var firstFailure = false
        if voice != currentVoice {
            let status = voice.withCString { espeak_SetVoiceByName($0) }
            if status == EE_OK {
                currentVoice = voice
            } else {
                // eSpeak-ng still has some earlier voice; which one is no longer known here.
                currentVoice = nil
                let error = SpeechError.voiceNotFound(voice, code: status.rawValue)
                firstFailure = failedVoices.insert(voice).inserted
                guard voice != fallback else { return .failure(error) }
                let fallbackStatus = fallback.withCString { espeak_SetVoiceByName($0) }
                guard fallbackStatus == EE_OK else { return .failure(.voiceNotFound(fallback, code: fallbackStatus.rawValue)) }
                currentVoice = fallback
                used = fallback
                voiceError = error
            }
        }
        let collector = SampleCollector()
        let status = withExtendedLifetime(collector) {
            let userData = Unmanaged.passUnretained(collector).toOpaque()
            return text.withCString { text in
                espeak_Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, UInt32(espeakCHARS_UTF8), nil, userData)
            }
        }
        guard status == EE_OK else { return .failure(.synthesis(code: status.rawValue)) }
        return .success(Rendered(
            synthesis: SpeechSynthesis(samples: collector.samples, voice: used, voiceError: voiceError),
            firstFailureOfVoice: firstFailure))
    }

    /// Runs `body` on the thread and waits for its result.
    private static func run<Value>(on jobs: ConditionLock<[() -> Void]>, _ body: @escaping () -> Value) -> Value {
        let slot = ResultSlot<Value>()
        jobs.update { queue in
            queue.append {
                let value = body()
                jobs.update { _ in slot.value = value }
            }
        }
        return jobs.wait(until: { _ in slot.value != nil }) { _ in slot.value! }
    }
}

/// Where a job's result waits for its caller; read and written under the job queue's lock.
private final class ResultSlot<Value> {
    var value: Value?
}

/// The samples of one `espeak_Synth` call, reached from the callback through `user_data`.
private final class SampleCollector {
    var samples: [Int16] = []
}

/// The synth callback: called on the eSpeak thread, during `espeak_Synth`, once per block of
/// samples and with no samples at the end.
private func collectSamples(
    _ samples: UnsafeMutablePointer<Int16>?, _ count: Int32, _ events: UnsafeMutablePointer<espeak_EVENT>?
) -> Int32 {
    guard let samples, count > 0, let userData = events?.pointee.user_data else { return 0 }
    let collector = Unmanaged<SampleCollector>.fromOpaque(userData).takeUnretainedValue()
    collector.samples.append(contentsOf: UnsafeBufferPointer(start: samples, count: Int(count)))
    return 0
}
