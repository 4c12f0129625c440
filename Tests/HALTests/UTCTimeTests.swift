import Foundation
import HAL
import Testing
import UTC

/// ``UTCTime`` against Foundation's own ISO 8601 formatting, which it stands in for.
@Suite struct UTCTimeTests {
    let rfc3339 = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    let basic = Date.ISO8601FormatStyle(
        dateSeparator: .omitted, dateTimeSeparator: .standard, timeSeparator: .omitted, includingFractionalSeconds: true)
    let day = Date.ISO8601FormatStyle(timeZone: .gmt).year().month().day()

    func expectSameAsFoundation(_ date: Date) {
        let time = UTCTime(date)
        #expect(time.rfc3339 == date.formatted(rfc3339), "\(date.timeIntervalSince1970)")
        #expect(time.basic == date.formatted(basic), "\(date.timeIntervalSince1970)")
        #expect(time.dayString == date.formatted(day), "\(date.timeIntervalSince1970)")
    }

    @Test func randomInstantsFrom1970To2200FormatAsFoundationDoes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            expectSameAsFoundation(Date(timeIntervalSince1970: .random(in: 0..<7_258_118_400, using: &generator)))
        }
        // Whole milliseconds, as capture times often are: the ones a rounding error would move.
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: 1_700_000_000_000..<2_000_000_000_000, using: &generator)
            expectSameAsFoundation(Date(timeIntervalSince1970: Double(milliseconds) / 1000))
        }
    }

    @Test func leapDaysCenturiesAndTheLastMillisecondOfAYear() {
        let instants: [Double] = [
            0, 951_782_400, 951_868_799.999, 4_107_542_400, 1_709_164_800.5, 1_735_689_599.999,
            978_307_200, 978_307_199.9995, 1_795_000_000.0009, -0.0005, -86_400.25
        ]
        for instant in instants { expectSameAsFoundation(Date(timeIntervalSince1970: instant)) }
        let leap = UTCTime(Date(timeIntervalSince1970: 951_782_400))  // 2000-02-29
        #expect(leap.year == 2000 && leap.month == 2 && leap.day == 29 && leap.hour == 0)
    }

    @Test func theBasicFormParsesToTheInstantFoundationParses() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: 0..<7_258_118_400_000, using: &generator)
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            let text = date.formatted(basic)
            let parsed = try #require(UTCTime(basic: text), "\(text)")
            #expect(parsed == UTCTime(date))
            // The same millisecond: Foundation counts from 2001 and UTCTime from 1970, so the two
            // Doubles may differ in their last bit.
            let foundation = try basic.parse(text)
            #expect(
                (parsed.date.timeIntervalSince1970 * 1000).rounded() == (foundation.timeIntervalSince1970 * 1000).rounded(),
                "\(text)")
        }
    }

    @Test func anythingButTheBasicFormIsNotParsed() {
        for text in [
            "2026-11-22T04:17:17.569Z", "20261122T041717Z", "20261122T041717.569", "20261322T041717.569Z",
            "20250229T000000.000Z", "20261122T241717.569Z", "2026112xT041717.569Z", ""
        ] {
            #expect(UTCTime(basic: text) == nil, "\(text)")
        }
        #expect(UTCTime(basic: "20240229T235959.999Z") != nil)
    }

    @Test func rfc3339ParsesToTheInstantFoundationParses() throws {
        var generator = SystemRandomNumberGenerator()
        let whole = Date.ISO8601FormatStyle()
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: 0..<7_258_118_400_000, using: &generator)
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            // With milliseconds (what the project writes) and without (gpsd may send either).
            for (text, style) in [(date.formatted(rfc3339), rfc3339), (date.formatted(whole), whole)] {
                let parsed = try #require(Date(rfc3339: text), "\(text)")
                let foundation = try style.parse(text)
                #expect(
                    (parsed.timeIntervalSince1970 * 1000).rounded() == (foundation.timeIntervalSince1970 * 1000).rounded(),
                    "\(text)")
            }
            #expect(UTCTime(rfc3339: UTCTime(date).rfc3339) == UTCTime(date))
        }
    }

    @Test func aFractionOfOneToNineDigitsIsKeptToTheMillisecond() throws {
        let cases: [(String, Int)] = [
            ("2026-11-26T08:10:11.5Z", 500), ("2026-11-26T08:10:11.05Z", 50), ("2026-11-26T08:10:11.123Z", 123),
            ("2026-11-26T08:10:11.1239Z", 123), ("2026-11-26T08:10:11.999999999Z", 999), ("2026-11-26T08:10:11Z", 0)
        ]
        for (text, millisecond) in cases {
            let time = try #require(UTCTime(rfc3339: text), "\(text)")
            #expect(time.millisecond == millisecond && time.second == 11 && time.day == 26, "\(text)")
        }
    }

    @Test func anythingButRFC3339InUTCIsNotParsed() {
        for text in [
            "20261122T041717.569Z", "2026-11-22T04:17:17.569", "2026-11-22T04:17:17.569+00:00", "2026-11-22 04:17:17Z",
            "2026-13-22T04:17:17Z", "2025-02-29T00:00:00Z", "2026-11-22T24:17:17Z", "2026-11-22T04:60:17Z",
            "2026-11-22T04:17:60Z", "2026-11-22T04:17:17.Z", "2026-11-22T04:17:17.1234567890Z", "2026-11-22T04:17:17,5Z",
            "2026-11-2xT04:17:17Z", "+026-11-22T04:17:17Z", "2026-11-22T04:17:17.5x5Z", "", "Z",
            "2026-11-22T04:17:17.569Z" + String(repeating: " ", count: 40)
        ] {
            #expect(UTCTime(rfc3339: text) == nil, "\(text)")
        }
        #expect(UTCTime(rfc3339: "2024-02-29T23:59:59.999Z") != nil)
    }
}
