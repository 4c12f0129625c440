/// What the motor does for one event: on and off times in turn, starting with "on".
///
/// `[150]` is one 150 ms pulse; `[80, 80, 80, 80, 80]` is three 80 ms pulses 80 ms apart. A
/// trailing off time is accepted and changes nothing: the line is inactive after the last pulse.
public struct HapticPattern: Sendable, Hashable, CustomStringConvertible {
    /// Every on or off time must be in this range, in milliseconds.
    public static let stepRange = 1...5000
    /// At most this many on and off times.
    public static let maxSteps = 16

    /// The times, in milliseconds: on, off, on, …
    public let milliseconds: [Int]
    /// For logs, e.g. `clear`; may be empty.
    public let name: String

    /// Throws ``HapticPatternError`` if `milliseconds` is empty, longer than ``maxSteps`` or has a
    /// time outside ``stepRange``.
    public init(_ milliseconds: [Int], name: String = "") throws(HapticPatternError) {
        guard !milliseconds.isEmpty else { throw .empty(name) }
        guard milliseconds.count <= Self.maxSteps else { throw .tooLong(name, milliseconds) }
        if let index = milliseconds.firstIndex(where: { !Self.stepRange.contains($0) }) {
            throw .outOfRange(name, milliseconds, index: index)
        }
        self.milliseconds = milliseconds
        self.name = name
    }

    private init(valid milliseconds: [Int], name: String) {
        self.milliseconds = milliseconds
        self.name = name
    }

    /// One 150 ms pulse.
    public static let clear = HapticPattern(valid: [150], name: "clear")
    /// Three 80 ms pulses, 80 ms apart.
    public static let alert = HapticPattern(valid: [80, 80, 80, 80, 80], name: "alert")

    /// The "on" times.
    public var pulses: [Int] { stride(from: 0, to: milliseconds.count, by: 2).map { milliseconds[$0] } }

    /// From the first pulse's start to the last pulse's end.
    public var duration: Duration {
        .milliseconds(milliseconds.count % 2 == 0 ? milliseconds.dropLast().reduce(0, +) : milliseconds.reduce(0, +))
    }

    /// `clear [150] ms`, or `[80, 80] ms` without a name.
    public var description: String {
        let times = "[\(milliseconds.map(String.init).joined(separator: ", "))] ms"
        return name.isEmpty ? times : "\(name) \(times)"
    }
}

/// Why a list of times is not a ``HapticPattern``.
public struct HapticPatternError: Error, Equatable, CustomStringConvertible {
    private enum Kind: Equatable {
        case empty
        case tooLong
        case outOfRange(index: Int)
    }

    private let kind: Kind
    /// The pattern's name, if it had one.
    public let name: String
    /// The times as given.
    public let milliseconds: [Int]

    private init(_ kind: Kind, _ name: String, _ milliseconds: [Int]) {
        self.kind = kind
        self.name = name
        self.milliseconds = milliseconds
    }

    static func empty(_ name: String) -> Self { Self(.empty, name, []) }
    static func tooLong(_ name: String, _ milliseconds: [Int]) -> Self { Self(.tooLong, name, milliseconds) }
    static func outOfRange(_ name: String, _ milliseconds: [Int], index: Int) -> Self {
        Self(.outOfRange(index: index), name, milliseconds)
    }

    public var description: String {
        let what = name.isEmpty ? "haptic pattern" : "haptic pattern \"\(name)\""
        let times = "[\(milliseconds.map(String.init).joined(separator: ", "))]"
        let range = "\(HapticPattern.stepRange.lowerBound)...\(HapticPattern.stepRange.upperBound)"
        switch kind {
        case .empty:
            return "\(what) is empty: give on and off times in milliseconds, starting with on, e.g. [150]"
        case .tooLong:
            return "\(what) \(times) has \(milliseconds.count) times; at most \(HapticPattern.maxSteps) are allowed"
        case .outOfRange(let index):
            let step = index % 2 == 0 ? "on" : "off"
            return "\(what) \(times): time \(index + 1) (\(step)) is \(milliseconds[index]) ms; each must be \(range) ms"
        }
    }
}
