internal import Glibc

/// Where speech goes: mono 16-bit samples, one utterance at a time.
///
/// An utterance is ``begin(voice:)``, any number of ``write(_:)``, then ``drain()`` at its natural
/// end or ``stop()`` to cut it off.
///
/// - Important: Calls block (a device plays in real time), so a sink is driven from one thread
///   of its own, never from the concurrency pool, and never from two threads at once.
public protocol AudioSink: AnyObject {
    /// What the sink plays to, for logs: `alsa:default`, `wav:out/speech`.
    var name: String { get }
    /// Opens the device (or prepares the folder) for mono 16-bit samples at `sampleRate`.
    /// Throws ``AudioSinkError``.
    func open(sampleRate: Int) throws
    /// Starts an utterance spoken with `voice`; reopens a sink that failed since ``open(sampleRate:)``.
    func begin(voice: String) throws
    /// Plays `samples`. Blocks while the device has no room, so with small blocks a call returns
    /// about one block's time after the previous one.
    func write(_ samples: ArraySlice<Int16>) throws
    /// The natural end: returns once everything written has been played.
    func drain() throws
    /// Cuts off the utterance now; what is written but not yet played is dropped.
    func stop()
    /// Releases the device. Safe to call twice.
    func close()
}

/// A sink named in configuration: `alsa`, `alsa:DEVICE` or `wav:DIRECTORY`.
public enum AudioSinkSpec: Sendable, Hashable, CustomStringConvertible {
    /// ALSA playback on a PCM device name (`default`, `hw:1,0`, `plughw:CARD=Loopback,DEV=0`).
    case alsa(device: String)
    /// One WAV file per utterance in a folder.
    case wav(directory: String)

    public static let defaultALSADevice = "default"

    /// Reads `alsa` (the `default` device), `alsa:DEVICE` or `wav:DIRECTORY`; anything after the
    /// first colon is the device or folder, so `alsa:hw:1,0` is the device `hw:1,0`.
    public init(parsing text: String) throws(AudioSinkError) {
        let kind = text.prefix { $0 != ":" }
        let argument = text.count > kind.count ? String(text.dropFirst(kind.count + 1)) : nil
        switch (kind, argument) {
        case ("alsa", nil):
            self = .alsa(device: Self.defaultALSADevice)
        case ("alsa", let device?) where !device.isEmpty:
            self = .alsa(device: device)
        case ("wav", let directory?) where !directory.isEmpty:
            self = .wav(directory: directory)
        default:
            throw .invalidSpec(text)
        }
    }

    /// The sink this names. `realtime` applies to WAV files; see ``WAVFileSink``.
    public func makeSink(realtime: Bool = true) -> any AudioSink {
        switch self {
        case .alsa(let device): ALSASink(device: device)
        case .wav(let directory): WAVFileSink(directory: directory, realtime: realtime)
        }
    }

    public var description: String {
        switch self {
        case .alsa(let device): "alsa:\(device)"
        case .wav(let directory): "wav:\(directory)"
        }
    }
}

/// Why an audio sink could not be named, opened or played to.
public struct AudioSinkError: Error, Equatable, Sendable, CustomStringConvertible {
    private enum Kind: Equatable, Sendable {
        case invalidSpec
        case notFound
        case busy
        case cannotOpen
        case unsupported
        case playback
        case directory
        case file
    }

    private let kind: Kind
    /// The ALSA device, folder or file concerned; for an invalid spec, the text given.
    public let subject: String
    public let detail: String

    private init(_ kind: Kind, _ subject: String, _ detail: String = "") {
        self.kind = kind
        self.subject = subject
        self.detail = detail
    }

    static func invalidSpec(_ text: String) -> Self { .init(.invalidSpec, text) }
    static func notFound(device: String, _ detail: String) -> Self { .init(.notFound, device, detail) }
    static func busy(device: String, _ detail: String) -> Self { .init(.busy, device, detail) }
    static func cannotOpen(device: String, _ detail: String) -> Self { .init(.cannotOpen, device, detail) }
    static func unsupported(device: String, _ detail: String) -> Self { .init(.unsupported, device, detail) }
    static func playback(device: String, _ detail: String) -> Self { .init(.playback, device, detail) }
    static func directory(_ path: String, _ detail: String) -> Self { .init(.directory, path, detail) }
    static func file(_ path: String, _ detail: String) -> Self { .init(.file, path, detail) }

    public var isInvalidSpec: Bool { kind == .invalidSpec }
    public var isNotFound: Bool { kind == .notFound }
    public var isBusy: Bool { kind == .busy }

    public var description: String {
        switch kind {
        case .invalidSpec:
            "invalid audio sink '\(subject)': use 'alsa' (the default device), 'alsa:DEVICE' or 'wav:DIRECTORY'"
        case .notFound:
            "ALSA device '\(subject)' not found (\(detail)); `aplay -L` lists the devices"
        case .busy:
            "ALSA device '\(subject)' is busy (\(detail)): another program is playing on it"
        case .cannotOpen:
            "cannot open ALSA device '\(subject)' for playback (\(detail)); `aplay -L` lists the devices"
        case .unsupported:
            "ALSA device '\(subject)' cannot play 16-bit mono: \(detail)"
        case .playback:
            "playback on ALSA device '\(subject)' failed: \(detail)"
        case .directory:
            "cannot write speech to the folder '\(subject)': \(detail)"
        case .file:
            "cannot write the speech file '\(subject)': \(detail)"
        }
    }

    static func text(errno code: Int32) -> String {
        "\(String(cString: strerror(code))) (errno \(code))"
    }
}
