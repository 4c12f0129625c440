public import Foundation

/// A wall-clock instant as UTC calendar fields, to the millisecond: the one place the project's
/// programs write and read UTC times (RFC 3339 on the wire, in gpsd's reports and in JSON lines;
/// ISO 8601 basic in file names).
///
/// Plain arithmetic on purpose: Foundation's calendar looks up the current time zone through ICU
/// on first use, which loads ICU's time zone data into memory for the rest of the run. The
/// fields are the ones `Date.ISO8601FormatStyle` gives (milliseconds truncated, not rounded).
public struct UTCTime: Sendable, Equatable {
    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int
    public var millisecond: Int

    public init(_ date: Date) {
        // From the reference date, as Foundation does, so the milliseconds are the same.
        let reference = date.timeIntervalSinceReferenceDate
        let whole = reference.rounded(.down)
        millisecond = min(Int((reference - whole) * 1000), 999)
        let seconds = Int64(whole) + 978_307_200
        let (days, secondOfDay) = Self.floorDivide(seconds, 86_400)
        hour = Int(secondOfDay / 3600)
        minute = Int(secondOfDay % 3600 / 60)
        second = Int(secondOfDay % 60)
        (year, month, day) = Self.civil(fromDays: days)
    }

    /// Parses the ``basic`` form, `20261122T041717.569Z`; nil for anything else.
    public init?(basic text: some StringProtocol) {
        let bytes = Array(text.utf8.prefix(21))
        guard bytes.count == 20, bytes[8] == UInt8(ascii: "T"), bytes[15] == UInt8(ascii: "."),
            bytes[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? { Self.number(bytes[range]) }
        guard let year = number(0..<4), let month = number(4..<6), let day = number(6..<8),
            let hour = number(9..<11), let minute = number(11..<13), let second = number(13..<15),
            let millisecond = number(16..<19)
        else { return nil }
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second, millisecond: millisecond)
    }

    /// Parses RFC 3339 in UTC, `2026-11-22T04:17:17.569Z`: seconds with an optional fraction of 1
    /// to 9 digits (kept to the millisecond, truncated), `Z` only; nil for anything else, and for
    /// more than 40 bytes. What gpsd reports, what agents send and what this project writes.
    public init?(rfc3339 text: some StringProtocol) {
        let bytes = Array(text.utf8.prefix(41))
        guard (20...40).contains(bytes.count), bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[bytes.count - 1] == UInt8(ascii: "Z")
        else { return nil }
        var millisecond = 0
        if bytes.count > 20 {
            // `.` and 1 to 9 digits before the `Z`.
            let fraction = bytes[20..<(bytes.count - 1)]
            guard bytes[19] == UInt8(ascii: "."), (1...9).contains(fraction.count), Self.number(fraction) != nil,
                let digits = Self.number(fraction.prefix(3))
            else { return nil }
            millisecond = digits * [100, 10, 1][min(fraction.count, 3) - 1]
        }
        guard let year = Self.number(bytes[0..<4]), let month = Self.number(bytes[5..<7]),
            let day = Self.number(bytes[8..<10]), let hour = Self.number(bytes[11..<13]),
            let minute = Self.number(bytes[14..<16]), let second = Self.number(bytes[17..<19])
        else { return nil }
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second, millisecond: millisecond)
    }

    /// The fields as parsed, if they name a day of the calendar and a time of that day (no leap
    /// second); what both parsers check.
    private init?(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, millisecond: Int) {
        guard (1...12).contains(month), (1...Self.daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        (self.year, self.month, self.day) = (year, month, day)
        (self.hour, self.minute, self.second, self.millisecond) = (hour, minute, second, millisecond)
    }

    /// The decimal number of ASCII digits only; nil for any other byte or none at all.
    private static func number(_ digits: ArraySlice<UInt8>) -> Int? {
        guard !digits.isEmpty else { return nil }
        var value = 0
        for byte in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// The instant, as Foundation's ISO 8601 parsing gives it.
    public var date: Date {
        let days = Self.days(fromCivil: Int64(year), Int64(month), Int64(day))
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - 978_307_200
        return Date(timeIntervalSinceReferenceDate: Double(seconds) + Double(millisecond) / 1000)
    }

    /// RFC 3339 with milliseconds, `2026-11-22T04:17:17.569Z`.
    public var rfc3339: String {
        text {
            $0.date(dashes: true); $0.ascii("T"); $0.time(colons: true)
        }
    }

    /// ISO 8601 basic form, `20261122T041717.569Z`.
    public var basic: String {
        text {
            $0.date(dashes: false); $0.ascii("T"); $0.time(colons: false)
        }
    }

    /// The calendar day, `2026-11-22`.
    public var dayString: String {
        text { $0.date(dashes: true) }
    }

    private func text(_ build: (inout Writer) -> Void) -> String {
        var writer = Writer(time: self)
        build(&writer)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    private struct Writer {
        let time: UTCTime
        var bytes: [UInt8] = []

        init(time: UTCTime) {
            self.time = time
            bytes.reserveCapacity(24)
        }

        mutating func ascii(_ character: Unicode.Scalar) { bytes.append(UInt8(character.value)) }

        /// `value` (not negative) in decimal, zero-padded to `width`.
        mutating func digits(_ value: Int, _ width: Int) {
            let start = bytes.count
            var rest = value
            repeat {
                bytes.append(UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            } while rest > 0
            while bytes.count - start < width { bytes.append(UInt8(ascii: "0")) }
            bytes[start...].reverse()
        }

        mutating func date(dashes: Bool) {
            digits(time.year, 4)
            if dashes { ascii("-") }
            digits(time.month, 2)
            if dashes { ascii("-") }
            digits(time.day, 2)
        }

        mutating func time(colons: Bool) {
            digits(time.hour, 2)
            if colons { ascii(":") }
            digits(time.minute, 2)
            if colons { ascii(":") }
            digits(time.second, 2)
            ascii(".")
            digits(time.millisecond, 3)
            ascii("Z")
        }
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        let q = a >= 0 ? a / b : (a - b + 1) / b
        return (q, a - q * b)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (`days_from_civil`).
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Year, month and day of a day count from 1970-01-01 in the proleptic Gregorian calendar
    /// (the algorithm of Howard Hinnant's `civil_from_days`).
    private static func civil(fromDays days: Int64) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0)), Int(month), Int(day))
    }
}

extension Date {
    /// RFC 3339 UTC with milliseconds, `2026-11-22T04:17:17.569Z`: ``UTCTime/rfc3339``.
    public var rfc3339Milliseconds: String { UTCTime(self).rfc3339 }

    /// The instant of an RFC 3339 UTC time (``UTCTime/init(rfc3339:)``); nil if it is not one.
    public init?(rfc3339 text: some StringProtocol) {
        guard let time = UTCTime(rfc3339: text) else { return nil }
        self = time.date
    }
}
