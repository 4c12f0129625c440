import Foundation
import HAL
import Testing

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
}
