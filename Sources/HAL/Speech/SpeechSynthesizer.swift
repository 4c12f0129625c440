internal import Glibc

/// Turns text into mono 16-bit samples, handed over block by block as they are made, so that
/// playback can start while the rest of a sentence is still being synthesized.
///
/// - Important: ``start(text:voice:)`` and ``SpeechStream/next()`` block; ``Speaker`` calls them
///   on its own thread, never on the caller's. Finish or cancel one stream before starting the
///   next from the same thread: a synthesizer may make one utterance at a time.
public protocol SpeechSynthesizer: Sendable {
    associatedtype Stream: SpeechStream
    /// Samples per second of everything this synthesizer makes.
    var sampleRate: Int { get }
    /// Starts speaking `text` with `voice`; returns once the voice is settled (the stream says
    /// which one speaks), usually before any sample is made.
    func start(text: String, voice: String) throws -> Stream
}

/// One utterance as it is synthesized. Read it from one thread; ``cancel()`` may come from any.
public protocol SpeechStream: AnyObject {
    /// The voice that speaks: the one asked for, or the fallback when that one failed.
    var voice: String { get }
    /// Why the voice asked for was not used; nil when it was.
    var voiceError: SpeechError? { get }
    /// The next block of samples, in order, waiting until it is made; nil after the last one or
    /// once cancelled. Throws if synthesis failed.
    func next() throws -> [Int16]?
    /// Stops synthesis now: nothing more is made and ``next()`` returns nil. Safe to call twice,
    /// and after the end.
    func cancel()
}

extension SpeechSynthesizer {
    /// The whole utterance at once, for tools and tests; ``Speaker`` streams instead.
    public func render(text: String, voice: String) throws -> SpeechSynthesis {
        let stream = try start(text: text, voice: voice)
        var samples: [Int16] = []
        while let block = try stream.next() { samples += block }
        return SpeechSynthesis(samples: samples, voice: stream.voice, voiceError: stream.voiceError)
    }
}

/// One synthesized utterance.
public struct SpeechSynthesis: Sendable, Equatable {
    public var samples: [Int16]
    /// The voice that spoke: the one asked for, or the fallback when that one failed.
    public var voice: String
    /// Why the voice asked for was not used; nil when it was.
    public var voiceError: SpeechError?

    public init(samples: [Int16], voice: String, voiceError: SpeechError?) {
        self.samples = samples
        self.voice = voice
        self.voiceError = voiceError
    }
}

/// Why speech could not be synthesized, or not with the voice asked for.
public struct SpeechError: Error, Equatable, Sendable, CustomStringConvertible {
    private enum Kind: Equatable, Sendable {
        case notInitialized(Int32)
        case voiceNotFound(voice: String, code: Int32)
        case synthesis(code: Int32)
        case thread(Int32)
    }

    private let kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    static func notInitialized(_ result: Int32) -> Self { Self(.notInitialized(result)) }
    static func voiceNotFound(_ voice: String, code: Int32) -> Self { Self(.voiceNotFound(voice: voice, code: code)) }
    static func synthesis(code: Int32) -> Self { Self(.synthesis(code: code)) }
    static func thread(_ code: Int32) -> Self { Self(.thread(code)) }

    /// The voice that could not be set, for ``isVoiceNotFound`` errors.
    public var voice: String? {
        if case .voiceNotFound(let voice, _) = kind { return voice }
        return nil
    }

    public var isVoiceNotFound: Bool { voice != nil }

    public var description: String {
        switch kind {
        case .notInitialized(let result):
            "eSpeak-ng did not initialize (espeak_Initialize returned \(result)): is espeak-ng-data installed?"
        case .voiceNotFound(let voice, let code):
            "eSpeak-ng has no voice named '\(voice)' (espeak_SetVoiceByName: \(Self.name(code))); "
                + "voice names are file names such as 'en', 'ko' or 'cmn-latn-pinyin'"
        case .synthesis(let code):
            "eSpeak-ng could not synthesize the text (espeak_Synth: \(Self.name(code)))"
        case .thread(let code):
            "cannot start the eSpeak-ng thread: \(String(cString: strerror(code))) (errno \(code))"
        }
    }

    /// Names for `espeak_ERROR` values.
    private static func name(_ code: Int32) -> String {
        switch code {
        case -1: "EE_INTERNAL_ERROR"
        case 1: "EE_BUFFER_FULL"
        case 2: "EE_NOT_FOUND"
        default: "error \(code)"
        }
    }
}
