public import Foundation

public struct SelectionError: Error, CustomStringConvertible {
    public let text: String
    public let reason: String
    public var description: String { "'\(text)': \(reason)" }
}

/// Which recorded segments `dashcam-agent protect` keeps: by sequence number (what the metadata
/// lines and `status` show) or by the time they cover.
public enum SegmentSelection: Sendable, Equatable {
    /// The newest segment of each of these sequence numbers (the numbering restarts with the agent).
    case sequence(ClosedRange<Int>)
    /// Every segment whose span overlaps these moments; a span reaching past the newest segment
    /// keeps the segments still to come until its end.
    case time(ClosedRange<Date>)

    static let forms = "a sequence number (`42`), a range of them (`40..45`), a time or time range "
        + "(`09:30..09:35` today, `2026-11-23T09:30..2026-11-23T09:35`, `…Z` or `+01:00` for a zone, `now`), "
        + "or --last with a duration (`90s`, `2m`, `1h`)"

    /// What the user typed: `42`, `40..45`, `09:30`, `09:30..now`, `2026-11-23T09:30:00Z..2026-11-23T09:35:00Z`.
    /// Times without a zone are the device's local time; a time of day alone is today.
    public static func parse(_ text: String, now: Date = .now, timeZone: TimeZone = .current) throws(SelectionError) -> Self {
        let parts = text.components(separatedBy: "..")
        guard (1...2).contains(parts.count), parts.allSatisfy({ !$0.isEmpty }) else {
            throw SelectionError(text: text, reason: "expected \(forms)")
        }
        let numbers = parts.compactMap { Int($0) }
        if numbers.count == parts.count {
            guard numbers.allSatisfy({ $0 >= 0 }), numbers[0] <= numbers[numbers.count - 1] else {
                throw SelectionError(text: text, reason: "sequence numbers are 0 or more, the first not after the last")
            }
            return .sequence(numbers[0]...numbers[numbers.count - 1])
        }
        var times: [Date] = []
        for part in parts {
            guard let time = moment(part, now: now, timeZone: timeZone) else {
                throw SelectionError(text: text, reason: "'\(part)' is not a time; expected \(forms)")
            }
            times.append(time)
        }
        guard times[0] <= times[times.count - 1] else {
            throw SelectionError(text: text, reason: "the range ends before it starts")
        }
        return .time(times[0]...times[times.count - 1])
    }

    /// The last `duration` (`90s`, `2m`, `1h`, at most a day) up to now, and the segment in progress.
    public static func last(_ duration: String, now: Date = .now) throws(SelectionError) -> Self {
        guard let unit = duration.last, let count = Int(duration.dropLast()), count > 0,
              let seconds = ["s": 1, "m": 60, "h": 3600][String(unit)].map({ $0 * count }), seconds <= 86_400
        else {
            throw SelectionError(text: duration, reason: "expected a duration up to a day: seconds, minutes or hours (`90s`, `2m`, `1h`)")
        }
        return .time(now.addingTimeInterval(-Double(seconds))...now)
    }

    /// The one line sent to the running agent: `protect seq A B` or `protect time MS MS` (Unix ms).
    public var request: String {
        switch self {
        case .sequence(let range): "protect seq \(range.lowerBound) \(range.upperBound)"
        case .time(let range): "protect time \(Self.ms(range.lowerBound)) \(Self.ms(range.upperBound))"
        }
    }

    /// The inverse of ``request``.
    public init?(request: String) {
        let words = request.split(separator: " ")
        guard words.count == 4, words[0] == "protect", let a = Int64(words[2]), let b = Int64(words[3]), a <= b else { return nil }
        switch words[1] {
        case "seq": self = .sequence(Int(a)...Int(b))
        case "time": self = .time(Date(timeIntervalSince1970: Double(a) / 1000)...Date(timeIntervalSince1970: Double(b) / 1000))
        default: return nil
        }
    }

    /// Whether a segment that starts at `start` and lasts `length` is in a time selection.
    static func overlaps(_ range: ClosedRange<Date>, start: Date, length: TimeInterval) -> Bool {
        start <= range.upperBound && start.addingTimeInterval(length) > range.lowerBound
    }

    private static func ms(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// `now`, `HH:MM[:SS]` (today), or `YYYY-MM-DD[T ]HH:MM[:SS[.fff]]` with an optional `Z` or `±HH:MM`.
    private static func moment(_ text: String, now: Date, timeZone: TimeZone) -> Date? {
        if text == "now" { return now }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        var components: DateComponents
        var time: (hour: Substring, minute: Substring, second: Substring?, fraction: Substring?)
        var zoneText: Substring?
        if let match = text.wholeMatch(of: /(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?/) {
            components = calendar.dateComponents([.year, .month, .day], from: now)
            time = (match.1, match.2, match.3, match.4)
            zoneText = match.5
        } else if let match = text.wholeMatch(of: /(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?/) {
            components = DateComponents(year: Int(match.1), month: Int(match.2), day: Int(match.3))
            time = (match.4, match.5, match.6, match.7)
            zoneText = match.8
        } else {
            return nil
        }
        components.hour = Int(time.hour)
        components.minute = Int(time.minute)
        components.second = time.second.flatMap { Int($0) } ?? 0
        components.nanosecond = time.fraction.flatMap { Int($0.padding(toLength: 3, withPad: "0", startingAt: 0)) }.map { $0 * 1_000_000 } ?? 0
        if let zoneText {
            guard let zone = zoneText == "Z" ? TimeZone.gmt : offsetZone(zoneText) else { return nil }
            calendar.timeZone = zone
        }
        components.calendar = calendar
        components.timeZone = calendar.timeZone
        guard components.isValidDate else { return nil }
        return components.date
    }

    private static func offsetZone(_ text: Substring) -> TimeZone? {
        let digits = text.dropFirst().filter(\.isNumber)
        guard digits.count == 4, let hours = Int(digits.prefix(2)), let minutes = Int(digits.suffix(2)), hours < 24, minutes < 60 else { return nil }
        let seconds = (hours * 3600 + minutes * 60) * (text.first == "-" ? -1 : 1)
        return TimeZone(secondsFromGMT: seconds)
    }
}
