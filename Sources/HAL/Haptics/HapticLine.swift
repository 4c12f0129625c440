internal import Glibc

/// The output that drives the vibration motor: a GPIO line, or a log line on devices without one.
///
/// - Important: ``Haptics`` drives its line from a thread of its own, and ``release()`` may come
///   from another (``Haptics/close()``, `deinit`), so an implementation must be safe to call from
///   any thread. Once released, ``setActive(_:)`` throws and ``release()`` does nothing.
public protocol HapticLine: AnyObject, Sendable, CustomStringConvertible {
    /// Drives the line active (motor on) or inactive (motor off). Throws ``HapticsError``, or
    /// whatever the implementation fails with.
    func setActive(_ active: Bool) throws
    /// Drives the line inactive, if it can, and lets go of it. Safe to call more than once.
    func release()
}

/// Why a haptic line could not be opened or driven, or the player could not start.
public struct HapticsError: Error, Equatable, CustomStringConvertible {
    private enum Kind: Equatable {
        case open
        case set
        case released
        case thread
    }

    private let kind: Kind
    /// The `errno` behind the error, if there is one.
    public let code: Int32?
    private let message: String

    private init(_ kind: Kind, code: Int32?, _ message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }

    /// `message` names the chip and the line (libgpiod's shim writes it).
    static func open(_ message: String, code: Int32) -> Self { Self(.open, code: code, message) }
    static func set(_ message: String, code: Int32) -> Self { Self(.set, code: code, message) }
    static func released(_ line: String) -> Self { Self(.released, code: nil, "\(line): the line was released") }
    static func thread(_ code: Int32) -> Self {
        Self(.thread, code: code, "Cannot start the haptics thread: \(String(cString: strerror(code))) (errno \(code))")
    }

    /// The line could not be requested.
    public var isOpenFailure: Bool { kind == .open }
    /// The chip, or the line asked for by name, does not exist.
    public var isNotFound: Bool { kind == .open && code == ENOENT }
    /// Another consumer holds the line.
    public var isBusy: Bool { kind == .open && code == EBUSY }
    public var isPermissionDenied: Bool { kind == .open && (code == EACCES || code == EPERM) }
    /// The line was used after ``HapticLine/release()``.
    public var isReleased: Bool { kind == .released }

    public var description: String { message }
}
