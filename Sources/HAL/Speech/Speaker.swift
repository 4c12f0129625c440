internal import Glibc
public import Logging

/// Speaks guidance one utterance at a time, newest first.
///
/// ``say(text:voice:urgent:receivedAt:)`` returns at once; a thread of the speaker's own
/// plays the text to the sink while the synthesizer makes it, so neither ever runs on the
/// caller's path.
/// The rules, all in favour of the newest guidance:
/// - Utterances never overlap: one is synthesized, played and drained (or cut off) before the
///   next begins.
/// - An urgent message cuts off whatever is being spoken: the sink is stopped, dropping the audio
///   it holds, and the urgent message is spoken next.
/// - A normal message lets the current utterance finish, but replaces a message waiting to start.
///   At most one such message waits.
/// - A message to keep (`keep`: the device's status phrases) is never replaced: it waits its turn
///   after the waiting guidance, in order with the others kept (at most four), and if an urgent
///   message cuts it off it is spoken again, whole.
///
/// Synthesis streams: the first block the synthesizer makes goes to the sink while the rest of
/// the sentence is still being made (by ``EspeakSynthesizer``'s own thread), so an utterance
/// starts after the synthesis of its first block, not of the whole sentence. The thread checks
/// for an urgent message between blocks of ``Options/block`` (20 ms) and cancels the stream it
/// cuts off, which stops synthesis too; an urgent message cuts in within about one block plus the
/// synthesis of its own first block.
///
/// ``stats`` counts what happened to every message; ``recentLatencies`` keeps, per utterance, the
/// time from `receivedAt` until its first sample was handed to the sink.
public final class Speaker: Sendable {
    public struct Options: Sendable {
        /// How much audio is written to the sink at a time, and so about how late an urgent
        /// message cuts in.
        public var block: Duration
        /// How many latencies ``Speaker/recentLatencies`` keeps.
        public var latencyHistory: Int
        /// Called on the speaker's thread with each utterance's latency, when its first sample has
        /// been handed to the sink.
        public var onFirstSample: (@Sendable (Duration) -> Void)?

        public init(
            block: Duration = .milliseconds(20), latencyHistory: Int = 100,
            onFirstSample: (@Sendable (Duration) -> Void)? = nil
        ) {
            self.block = block
            self.latencyHistory = latencyHistory
            self.onFirstSample = onFirstSample
        }
    }

    /// What became of the messages given to ``Speaker/say(text:voice:urgent:receivedAt:)``: once
    /// the speaker is idle, each non-empty message is in exactly one of the first four counts.
    /// Messages still waiting when the speaker is closed are in none.
    public struct Stats: Sendable, Equatable {
        /// Played to their natural end.
        public var spoken = 0
        /// Cut off by an urgent message, while playing or before they started.
        public var cutOff = 0
        /// Replaced by a newer message before they started (a kept one: dropped as the oldest of
        /// more than four waiting).
        public var replaced = 0
        /// Not spoken because synthesis or the sink failed.
        public var failures = 0
        /// Spoken with the synthesizer's fallback voice because the voice asked for failed.
        public var voiceFallbacks = 0

        public init() {}
    }

    private let worker: SpeakerWorker

    /// Opens `sink` at the synthesizer's rate (throwing ``AudioSinkError`` if it cannot) and starts
    /// the speaker's thread. The speaker owns the sink from now on and closes it in ``close()``.
    public init(
        synthesizer: some SpeechSynthesizer, sink: sending any AudioSink, logger: Logger,
        options: Options = Options()
    ) throws {
        try sink.open(sampleRate: synthesizer.sampleRate)
        worker = try SpeakerWorker(synthesizer: synthesizer, sink: sink, logger: logger, options: options)
    }

    deinit { worker.shutdown() }

    /// Queues `text` to be spoken with `voice` (a name for the synthesizer, `en`, `ko`) and returns
    /// at once. `receivedAt` is when the message reached the agent, the start of its latency.
    /// `keep`: no newer message replaces this one (see the rules above). Empty (or blank) text is
    /// ignored.
    public func say(
        text: String, voice: String, urgent: Bool = false, keep: Bool = false,
        receivedAt: ContinuousClock.Instant = .now
    ) {
        worker.say(text: text, voice: voice, urgent: urgent, keep: keep, receivedAt: receivedAt)
    }

    public var stats: Stats { worker.stats }

    /// The latest latencies, oldest first: from `receivedAt` to the first sample handed to the sink.
    public var recentLatencies: [Duration] { worker.recentLatencies }

    /// Returns once nothing is being spoken and nothing waits (or the speaker is closed).
    public func waitUntilIdle() async {
        await worker.waitUntilIdle()
    }

    /// Cuts off what is being spoken, drops what waits, stops the thread and closes the sink.
    /// Safe to call more than once.
    public func close() {
        worker.shutdown()
    }
}

/// The thread and the sink, driven by ``Speaker/StateMachine``. The sink and the synthesizer are
/// used on the thread only; everything `say` and the readers touch is behind `lock`.
private final class SpeakerWorker: @unchecked Sendable {
    struct Message {
        var text: String
        var voice: String
        var receivedAt: ContinuousClock.Instant
    }

    typealias Machine = Speaker.StateMachine<Message>
    typealias Request = Machine.Entry
    typealias Outcome = Machine.Outcome

    struct State {
        var machine = Machine()
        var thread: NamedThread?
        var latencies: [Duration] = []
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let synthesizer: any SpeechSynthesizer
    private let sink: any AudioSink
    private let logger: Logger
    private let options: Options
    private let blockSamples: Int
    private let lock = WaitableState(State())

    typealias Options = Speaker.Options

    init(synthesizer: any SpeechSynthesizer, sink: any AudioSink, logger: Logger, options: Options) throws {
        self.synthesizer = synthesizer
        self.sink = sink
        self.logger = logger
        self.options = options
        let (seconds, attoseconds) = options.block.components
        let perSecond = Double(seconds) + Double(attoseconds) / 1e18
        blockSamples = max(1, Int(perSecond * Double(synthesizer.sampleRate)))
        do {
            let thread = try NamedThread.start(name: "speech") { [self] in run() }
            lock.withLock { $0.thread = thread }
        } catch {
            sink.close()
            throw SpeechError.thread(error.code)
        }
        logger.debug("speech: speaking to \(sink.name) at \(synthesizer.sampleRate) Hz")
    }

    func say(text: String, voice: String, urgent: Bool, keep: Bool, receivedAt: ContinuousClock.Instant) {
        guard text.contains(where: { !$0.isWhitespace }) else { return }
        let said = lock.update { state in
            state.machine.say(Message(text: text, voice: voice, receivedAt: receivedAt), urgent: urgent, keep: keep)
        }
        guard said.id > 0 else { return }
        if let replaced = said.replaced { logger.debug("speech: #\(said.id) replaces #\(replaced), which had not started") }
        if let cut = said.cut { logger.debug("speech: urgent #\(said.id) cuts off #\(cut)") }
    }

    var stats: Speaker.Stats { lock.withLock { $0.machine.stats } }

    var recentLatencies: [Duration] { lock.withLock { $0.latencies } }

    func waitUntilIdle() async {
        await withCheckedContinuation { continuation in
            let idle = lock.withLock { state in
                if state.machine.isIdle { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    func shutdown() {
        let thread = lock.update { state -> NamedThread? in
            guard state.machine.shutDown() else { return nil }
            defer { state.thread = nil }
            return state.thread
        }
        thread?.join()
    }

    // MARK: - The thread

    private func run() {
        while let request = nextRequest() {
            let outcome = speak(request)
            let waiters = lock.withLock { state -> [CheckedContinuation<Void, Never>] in
                guard state.machine.finished(outcome) else { return [] }
                defer { state.idleWaiters = [] }
                return state.idleWaiters
            }
            waiters.forEach { $0.resume() }
        }
        sink.close()
        let waiters = lock.withLock { state in
            defer { state.idleWaiters = [] }
            return state.idleWaiters
        }
        waiters.forEach { $0.resume() }
        logger.debug("speech: stopped")
    }

    private func nextRequest() -> Request? {
        lock.wait(until: { $0.machine.hasWork }) { $0.machine.start() }
    }

    private var cutRequested: Bool { lock.withLock { $0.machine.shouldCut } }

    private func speak(_ request: Request) -> Outcome {
        let stream: any SpeechStream
        do {
            stream = try synthesizer.start(text: request.message.text, voice: request.message.voice)
        } catch {
            logger.error("speech: #\(request.id) not spoken: \(error)")
            return .failed
        }
        // Cut off or failed, synthesis stops with the stream.
        defer { stream.cancel() }
        if stream.voiceError != nil { lock.withLock { $0.machine.voiceFellBack() } }
        var begun = false
        do {
            while let samples = try stream.next() {
                var offset = 0
                while offset < samples.count {
                    if cutRequested {
                        if begun { sink.stop() }
                        return .cutOff
                    }
                    if !begun {
                        try sink.begin(voice: stream.voice)
                        begun = true
                        firstSample(of: request)
                    }
                    let end = min(offset + blockSamples, samples.count)
                    try sink.write(samples[offset..<end])
                    offset = end
                }
            }
            if cutRequested {
                if begun { sink.stop() }
                return .cutOff
            }
            if begun { try sink.drain() }
            return .spoken
        } catch {
            if begun { sink.stop() }
            logger.error("speech: #\(request.id) not spoken: \(error)")
            return .failed
        }
    }

    private func firstSample(of request: Request) {
        // A kept message said again after a cut-off had its first sample the first time.
        guard !request.again else { return }
        let latency = request.message.receivedAt.duration(to: .now)
        lock.withLock { state in
            state.latencies.append(latency)
            if state.latencies.count > options.latencyHistory {
                state.latencies.removeFirst(state.latencies.count - options.latencyHistory)
            }
        }
        let (seconds, attoseconds) = latency.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        logger.debug("speech: first sample \(milliseconds) ms after receipt", metadata: ["utterance": "\(request.id)"])
        options.onFirstSample?(latency)
    }
}
