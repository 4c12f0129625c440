internal import Glibc

/// Why a haptic line could not be opened or driven, or the player could not start.
///
/// The description is one sentence naming the chip and the line as the user gave them (and as
/// they were found), what went wrong and, where the kernel tells, the `errno` text.
public struct GPIOError: Error, Equatable, CustomStringConvertible {
    private enum Kind: Equatable {
        case chipNotFound
        case lineNotFound
        case lineBusy(holder: String?)
        case permissionDenied
        case notAChip
        case invalidRequest
        case requestFailed
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

    /// No chip has that path, name, number or label.
    static func chipNotFound(_ message: String, code: Int32? = nil) -> Self { Self(.chipNotFound, code: code, message) }
    /// The chip has no line at that offset or with that name, or no chip has a line so named.
    static func lineNotFound(_ message: String, code: Int32? = nil) -> Self { Self(.lineNotFound, code: code, message) }
    /// Another consumer holds the line; `holder` is its name when the kernel gives one.
    static func lineBusy(_ message: String, holder: String?, code: Int32) -> Self {
        Self(.lineBusy(holder: holder), code: code, message)
    }
    static func permissionDenied(_ message: String, code: Int32) -> Self { Self(.permissionDenied, code: code, message) }
    /// The path exists but is not a GPIO chip.
    static func notAChip(_ message: String, code: Int32) -> Self { Self(.notAChip, code: code, message) }
    /// The request cannot name a line: an offset without a chip, a negative offset.
    static func invalidRequest(_ message: String) -> Self { Self(.invalidRequest, code: nil, message) }
    /// The chip or the request failed for another reason.
    static func requestFailed(_ message: String, code: Int32) -> Self { Self(.requestFailed, code: code, message) }
    static func set(_ message: String, code: Int32) -> Self { Self(.set, code: code, message) }
    static func released(_ line: String) -> Self { Self(.released, code: nil, "\(line): the line was released") }
    static func thread(_ code: Int32) -> Self {
        Self(.thread, code: code, "Cannot start the haptics thread: \(String(cString: strerror(code))) (errno \(code))")
    }

    /// The line could not be requested, for whatever reason.
    public var isOpenFailure: Bool {
        switch kind {
        case .chipNotFound, .lineNotFound, .lineBusy, .permissionDenied, .notAChip, .invalidRequest, .requestFailed: true
        case .set, .released, .thread: false
        }
    }

    /// The chip, or the line on it, does not exist.
    public var isNotFound: Bool { isChipNotFound || isLineNotFound }
    /// No chip has the path, name, number or label given.
    public var isChipNotFound: Bool { kind == .chipNotFound }
    /// The chip has no such line, or no chip has a line of that name.
    public var isLineNotFound: Bool { kind == .lineNotFound }
    /// Another consumer holds the line; ``holder`` names it if the kernel does.
    public var isBusy: Bool {
        if case .lineBusy = kind { return true }
        return false
    }

    /// The consumer holding a busy line (what `gpioinfo` shows), if the kernel names one.
    public var holder: String? {
        if case .lineBusy(let holder) = kind { return holder }
        return nil
    }

    /// The chip device may not be opened, or the line not requested, by this user.
    public var isPermissionDenied: Bool { kind == .permissionDenied }
    /// The path given as the chip exists but is not a GPIO chip (e.g. `/dev/null`).
    public var isNotAChip: Bool { kind == .notAChip }
    /// The request names no line: an offset without a chip, or a negative offset.
    public var isInvalidRequest: Bool { kind == .invalidRequest }
    /// The line was used after ``HapticLine/release()``.
    public var isReleased: Bool { kind == .released }

    public var description: String { message }
}
