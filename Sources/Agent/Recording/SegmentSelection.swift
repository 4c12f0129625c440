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

    static let forms =
        "a sequence number (`42`), a range of them (`40..45`), a time or time range "
        + "(`09:30..09:35` the latest such, `2026-11-23T09:30..2026-11-23T09:35`, `…Z` or `+01:00` for a zone, `now`), "
        + "or --last with a duration (`90s`, `2m`, `1h`)"

    /// What the user typed: `42`, `40..45`, `09:30`, `09:30..now`, `2026-11-23T09:30:00Z..2026-11-23T09:35:00Z`.
    /// Times without a zone are the device's local time. A time of day alone starts a range at
    /// its latest occurrence, counting up to an hour ahead as today's (just after midnight,
    /// `23:55` is last night's), and ends it at its first occurrence after the start
    /// (`23:58..00:02` crosses midnight).
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
            // The start is looked for back from now, the end forward from the start.
            let near: Moment.Near = times.last.map { .atOrAfter($0) } ?? .atOrBefore(now.addingTimeInterval(3600))
            guard let (time, movedDay) = Moment(part, now: now, timeZone: timeZone)?.date(near: near) else {
                throw SelectionError(text: text, reason: "'\(part)' is not a time; expected \(forms)")
            }
            // `09:35..09:30` is more likely a slip than a day: across midnight, 12 hours at most.
            if let start = times.last, movedDay, time.timeIntervalSince(start) > 12 * 3600 {
                throw SelectionError(text: text, reason: "the range ends before it starts (a range across midnight lasts 12 hours at most)")
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
        guard let unit = duration.last, let count = Int(duration.dropLast()), (1...86_400).contains(count),
            let seconds = ["s": 1, "m": 60, "h": 3600][String(unit)].map({ $0 * count }), seconds <= 86_400
        else {
            throw SelectionError(text: duration, reason: "expected a duration up to a day: seconds, minutes or hours (`90s`, `2m`, `1h`)")
        }
        return .time(now.addingTimeInterval(-Double(seconds))...now)
    }

    /// How far past now a time selection may end. The segments recorded until its end are filed
    /// as protected as they close, and the protected cap makes room for them by deleting incidents
    /// kept earlier: a range with no real end would do that for ever.
    public static let maxAhead: TimeInterval = 5 * 60
    /// The longest time selection, as for `--last`.
    public static let maxLength: TimeInterval = 24 * 3600

    /// Refuses what no running agent should act on at `now`: a time range that ends more than
    /// ``maxAhead`` after it, or lasts more than ``maxLength``. `text` is what the user typed (or
    /// the request line), for the message.
    public func check(_ text: String, now: Date = .now) throws(SelectionError) {
        guard case .time(let range) = self else { return }
        let ahead = range.upperBound.timeIntervalSince(now)
        if ahead > Self.maxAhead {
            throw SelectionError(
                text: text,
                reason: "the range ends \(Self.span(ahead)) from now; it may end at most "
                    + "\(Int(Self.maxAhead / 60)) minutes ahead (the segments still to come are protected as they close, until its end)")
        }
        if range.upperBound.timeIntervalSince(range.lowerBound) > Self.maxLength {
            throw SelectionError(
                text: text,
                reason: "the range lasts \(Self.span(range.upperBound.timeIntervalSince(range.lowerBound))); "
                    + "protect at most \(Int(Self.maxLength / 3600)) hours at once")
        }
    }

    /// `12 minutes`, `3 hours`, `more than a day`: rounded up, for messages.
    private static func span(_ seconds: TimeInterval) -> String {
        switch seconds {
        case ..<3600: "\(Int((seconds / 60).rounded(.up))) minutes"
        case ..<86_400: "\(Int((seconds / 3600).rounded(.up))) hours"
        default: "more than a day"
        }
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

    /// Unix milliseconds, held within what an Int64 can say (a request may name any number).
    static func ms(_ date: Date) -> Int64 {
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        return Int64(exactly: ms) ?? (ms < 0 ? Int64.min : Int64.max)
    }

    static func offsetZone(_ text: Substring) -> TimeZone? {
        let digits = text.dropFirst().filter(\.isNumber)
        guard digits.count == 4, let hours = Int(digits.prefix(2)), let minutes = Int(digits.suffix(2)), hours < 24, minutes < 60 else {
            return nil
        }
        let seconds = (hours * 3600 + minutes * 60) * (text.first == "-" ? -1 : 1)
        return TimeZone(secondsFromGMT: seconds)
    }
}

/// One end of a time selection as typed: `now`, a date and time, or a time of day whose date
/// depends on where it is looked for.
private struct Moment {
    enum Near {
        /// The latest occurrence not after this moment.
        case atOrBefore(Date)
        /// The first occurrence not before this moment.
        case atOrAfter(Date)
    }

    private let now: Date
    private var calendar: Calendar
    /// Nil for `now`.
    private var components: DateComponents?
    private var timeOfDay = false

    /// `now`, `HH:MM[:SS[.fff]]`, or `YYYY-MM-DD[T ]HH:MM[:SS[.fff]]`, each with an optional `Z` or `±HH:MM`.
    init?(_ text: String, now: Date, timeZone: TimeZone) {
        self.now = now
        calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        if text == "now" { return }
        var components = DateComponents()
        let time: (hour: Substring, minute: Substring, second: Substring?, fraction: Substring?)
        let zoneText: Substring?
        if let match = text.wholeMatch(of: /(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?/) {
            timeOfDay = true
            time = (match.1, match.2, match.3, match.4)
            zoneText = match.5
        } else if let match = text.wholeMatch(
            of: /(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?/)
        {
            components = DateComponents(year: Int(match.1), month: Int(match.2), day: Int(match.3))
            time = (match.4, match.5, match.6, match.7)
            zoneText = match.8
        } else {
            return nil
        }
        if let zoneText {
            guard let zone = zoneText == "Z" ? TimeZone.gmt : SegmentSelection.offsetZone(zoneText) else { return nil }
            calendar.timeZone = zone
        }
        components.hour = Int(time.hour)
        components.minute = Int(time.minute)
        components.second = time.second.flatMap { Int($0) } ?? 0
        components.nanosecond =
            time.fraction.flatMap { Int($0.padding(toLength: 3, withPad: "0", startingAt: 0)) }.map { $0 * 1_000_000 } ?? 0
        guard let hour = components.hour, let minute = components.minute, let second = components.second,
            hour < 24, minute < 60, second < 60
        else { return nil }
        if !timeOfDay {
            components.calendar = calendar
            components.timeZone = calendar.timeZone
            guard components.isValidDate else { return nil }
        }
        self.components = components
    }

    /// The moment; a time of day is taken on the day, in its own zone, that `near` asks for
    /// (`movedDay`: the day before or after the reference's).
    func date(near: Near) -> (date: Date, movedDay: Bool)? {
        guard var components else { return (now, false) }
        guard timeOfDay else { return calendar.date(from: components).map { ($0, false) } }
        let (reference, step) =
            switch near {
            case .atOrBefore(let date): (date, -1)
            case .atOrAfter(let date): (date, 1)
            }
        let day = calendar.dateComponents([.year, .month, .day], from: reference)
        components.year = day.year
        components.month = day.month
        components.day = day.day
        guard let sameDay = calendar.date(from: components) else { return nil }
        guard step < 0 ? sameDay > reference : sameDay < reference else { return (sameDay, false) }
        return calendar.date(byAdding: .day, value: step, to: sameDay).map { ($0, true) }
    }
}
