internal import CEspeakNG
internal import Glibc
public import Logging

/// Speech from libespeak-ng, 16-bit mono at the rate eSpeak-ng reports (22 050 Hz), streamed:
/// each block eSpeak-ng's synth callback makes is handed to the ``Stream`` at once, so the first
/// block can play while the rest of the sentence is synthesized.
///
/// eSpeak-ng keeps its state in globals and is not thread-safe, so every call into it, from every
/// `EspeakSynthesizer` in the process, runs on one thread of its own, one call at a time;
/// `espeak_Initialize` runs once, when the first synthesizer is made. A synthesizer is a cheap
/// handle on that thread: make as many as you like, from any thread.
///
/// A stream holds at most ``lookahead`` of audio its reader has not taken: then the eSpeak-ng
/// thread waits in the callback, so memory stays bounded however long the text. Cancelling a
/// stream (or dropping it) makes the callback return 1, which ends `espeak_Synth` at its next
/// block, and frees the thread for the next utterance.
///
/// - Important: `espeak_SetVoiceByName` keeps the previous voice when it fails. So the result of
///   every voice change is checked: a voice that cannot be set is reported
///   (``Stream/voiceError``, a warning in the log the first time) and the text is spoken
///   with ``fallbackVoice``, never silently with whatever voice spoke last.
public final class EspeakSynthesizer: SpeechSynthesizer {
    /// The voice that speaks when the one asked for cannot be set.
    public static let fallbackVoice = "en"
    /// How much audio a stream holds ahead of its reader before eSpeak-ng waits for it.
    public static let lookahead = Duration.seconds(1)
    /// The longest one utterance may sound: synthesis stops there, whatever the text (guidance is
    /// capped in characters before it gets here; this holds for any text).
    public static let maxUtteranceSeconds = 30

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

    /// Queues the text on the eSpeak-ng thread and waits until its voice is set (after any
    /// utterance still being made there); the samples then come out of the stream as made.
    public func start(text: String, voice: String) throws(SpeechError) -> Stream {
        let channel = SpeechChannel(
            limit: Int(Self.lookahead.components.seconds) * sampleRate,
            maxSamples: Self.maxUtteranceSeconds * sampleRate)
        engine.synthesize(text: text, voice: voice, fallback: Self.fallbackVoice, into: channel)
        let stream = Stream(channel: channel)
        let settled = channel.state.wait(until: { $0.voice != nil }) { $0.voice! }
        switch settled {
        case .failed(let error):
            throw error
        case .speaking(_, let error?, let firstFailure):
            let message: Logger.Message = "speech: \(error); speaking with '\(stream.voice)'"
            if firstFailure { logger.warning(message) } else { logger.debug(message) }
        case .speaking:
            break
        }
        return stream
    }

    /// `espeak_VOICE.identifier` of every voice eSpeak-ng has (`gmw/en`, `ko`, `sit/cmn-Latn-pinyin`),
    /// in its order. The voice name for ``start(text:voice:)`` is the last path component.
    public func voiceIdentifiers() -> [String] {
        engine.voiceIdentifiers()
    }

    /// One utterance coming out of eSpeak-ng. Dropping it cancels it.
    public final class Stream: SpeechStream, Sendable {
        private let channel: SpeechChannel

        fileprivate init(channel: SpeechChannel) {
            self.channel = channel
        }

        deinit { cancel() }

        public var voice: String {
            channel.state.withLock { state in
                if case .speaking(let voice, _, _) = state.voice { return voice }
                return ""
            }
        }

        public var voiceError: SpeechError? {
            channel.state.withLock { state in
                if case .speaking(_, let error, _) = state.voice { return error }
                return nil
            }
        }

        /// True once eSpeak-ng has made the last block (the reader may not have taken it yet),
        /// failed, or was stopped by ``cancel()``.
        public var isFinished: Bool { channel.state.withLock { $0.finished || $0.cancelled } }

        /// Samples eSpeak-ng has made for this stream so far, taken or not.
        public var samplesMade: Int { channel.state.withLock { $0.made } }

        public func next() throws(SpeechError) -> [Int16]? {
            let outcome = channel.state.wait(
                until: { !$0.blocks.isEmpty || $0.finished || $0.cancelled }
            ) { state -> Result<[Int16]?, SpeechError> in
                if state.cancelled { return .success(nil) }
                if !state.blocks.isEmpty { return .success(state.blocks[state.blocks.startIndex]) }
                return state.failure.map { .failure($0) } ?? .success(nil)
            }
            // Taken under `update`, which wakes the eSpeak-ng thread waiting for room.
            if case .success(let block?) = outcome {
                channel.state.update { state in
                    state.blocks.removeFirst()
                    state.buffered -= block.count
                }
            }
            return try outcome.get()
        }

        public func cancel() {
            channel.state.update { $0.cancelled = true }
        }
    }
}

/// What passes between the eSpeak-ng thread and one ``EspeakSynthesizer/Stream``, under one lock.
/// Reached from the synth callback through `user_data`.
private final class SpeechChannel: Sendable {
    enum Voice {
        case speaking(String, error: SpeechError?, firstFailure: Bool)
        case failed(SpeechError)
    }

    struct State {
        /// Nil until the eSpeak-ng thread has set the voice.
        var voice: Voice?
        var blocks: [[Int16]] = []
        /// Samples in `blocks`.
        var buffered = 0
        /// `espeak_Synth` has returned (or never ran).
        var finished = false
        var failure: SpeechError?
        /// The reader stopped: the callback aborts synthesis.
        var cancelled = false
        /// Samples the callback was given, including any refused after a cancel.
        var made = 0
    }

    /// Samples the channel holds before the callback waits.
    let limit: Int
    let state = WaitableState(State())

    /// Samples one utterance may have: synthesis stops there (however long the text).
    let maxSamples: Int

    init(limit: Int, maxSamples: Int = .max) {
        self.limit = limit
        self.maxSamples = maxSamples
    }

    /// On the eSpeak-ng thread: hands a block over, first waiting while the reader is `limit`
    /// behind. False once the reader has cancelled, to abort synthesis.
    func push(_ samples: UnsafeBufferPointer<Int16>) -> Bool {
        guard !samples.isEmpty else { return !state.withLock { $0.cancelled } }
        let made = state.withLock { state -> Int in
            state.made += samples.count
            return state.made
        }
        // Past the longest utterance: nothing more is handed over, and synthesis ends.
        guard made <= maxSamples else { return false }
        let open = state.wait(until: { $0.cancelled || $0.buffered < limit }) { !$0.cancelled }
        guard open else { return false }
        let block = Array(samples)
        state.update { state in
            state.blocks.append(block)
            state.buffered += block.count
        }
        return true
    }

    func settle(_ voice: Voice) {
        state.update { state in
            state.voice = voice
            if case .failed = voice { state.finished = true }
        }
    }

    func finish(failure: SpeechError?) {
        state.update { state in
            state.failure = failure
            state.finished = true
        }
    }
}

/// The one owner of eSpeak-ng's global state: a thread that makes every eSpeak-ng call.
private final class EspeakEngine: @unchecked Sendable {
    static let shared = Result { () throws(SpeechError) in try EspeakEngine() }

    let sampleRate: Int
    private let jobs: WaitableState<[() -> Void]>
    // These belong to the thread.
    /// The voice eSpeak-ng has now, when known for sure.
    private var currentVoice: String?
    private var failedVoices: Set<String> = []

    private init() throws(SpeechError) {
        let jobs = WaitableState<[() -> Void]>([])
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
            // 100 ms of buffer: the callback gets a block of about 50 ms of audio at a time.
            let rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 100, nil, espeakINITIALIZE_DONT_EXIT)
            if rate > 0 { espeak_SetSynthCallback(handOver) }
            return rate
        }
        guard rate > 0 else { throw .notInitialized(rate) }
        self.jobs = jobs
        self.sampleRate = Int(rate)
    }

    /// Queues the utterance; the channel hears of the voice, then the blocks, then the end.
    func synthesize(text: String, voice: String, fallback: String, into channel: SpeechChannel) {
        jobs.update { queue in
            queue.append { self.synthesizeOnThread(text: text, voice: voice, fallback: fallback, into: channel) }
        }
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

    private func synthesizeOnThread(text: String, voice: String, fallback: String, into channel: SpeechChannel) {
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
                guard voice != fallback else { return channel.settle(.failed(error)) }
                let fallbackStatus = fallback.withCString { espeak_SetVoiceByName($0) }
                guard fallbackStatus == EE_OK else {
                    return channel.settle(.failed(.voiceNotFound(fallback, code: fallbackStatus.rawValue)))
                }
                currentVoice = fallback
                used = fallback
                voiceError = error
            }
        }
        channel.settle(.speaking(used, error: voiceError, firstFailure: firstFailure))
        // A reader that gave up before its turn costs no synthesis.
        guard !channel.state.withLock({ $0.cancelled }) else { return channel.finish(failure: nil) }
        let status = withExtendedLifetime(channel) {
            let userData = Unmanaged.passUnretained(channel).toOpaque()
            return text.withCString { text in
                espeak_Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, UInt32(espeakCHARS_UTF8), nil, userData)
            }
        }
        // An aborted synthesis returns EE_OK too.
        channel.finish(failure: status == EE_OK ? nil : .synthesis(code: status.rawValue))
    }

    /// Runs `body` on the thread and waits for its result.
    private static func run<Value>(on jobs: WaitableState<[() -> Void]>, _ body: @escaping () -> Value) -> Value {
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

/// The synth callback: called on the eSpeak-ng thread, during `espeak_Synth`, once per block of
/// samples (possibly empty) and with no samples at the end. Returns 1 to abort synthesis.
private func handOver(
    _ samples: UnsafeMutablePointer<Int16>?, _ count: Int32, _ events: UnsafeMutablePointer<espeak_EVENT>?
) -> Int32 {
    guard let userData = events?.pointee.user_data else { return 0 }
    let channel = Unmanaged<SpeechChannel>.fromOpaque(userData).takeUnretainedValue()
    let block = samples.map { UnsafeBufferPointer(start: $0, count: Int(max(0, count))) } ?? UnsafeBufferPointer(start: nil, count: 0)
    return channel.push(block) ? 0 : 1
}
