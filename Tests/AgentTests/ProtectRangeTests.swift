import Agent
import Foundation
import Testing

/// A `protect` time range must end: at most a few minutes ahead, at most a day long. Otherwise
/// every segment still to come is filed as protected, and the protected cap deletes older incidents
/// to make room for them.
@Suite struct ProtectRangeTests {
    let now = Date(timeIntervalSince1970: 1_795_426_200)  // 2026-11-23T09:30:00Z

    func at(_ text: String) -> Date { try! Date(text, strategy: .iso8601) }

    @Test func rangesUpToFiveMinutesAheadAndADayLongAreAccepted() throws {
        try SegmentSelection.last("2m", now: now).check("--last 2m", now: now)
        try SegmentSelection.last("24h", now: now).check("--last 24h", now: now)
        try SegmentSelection.time(now...now.addingTimeInterval(SegmentSelection.maxAhead)).check("x", now: now)
        try SegmentSelection.parse("2026-11-20T09:30Z..2026-11-20T09:35Z", now: now).check("x", now: now)
        // Sequence numbers name segments already recorded: nothing is left pending.
        try SegmentSelection.sequence(0...Int.max).check("0..", now: now)
    }

    @Test(arguments: [
        ("protect time 0 9223372036854775807", "the range ends more than a day from now; it may end at most 5 minutes ahead"),
        ("protect time 1795426200000 1795426501000", "the range ends 6 minutes from now; it may end at most 5 minutes ahead"),
        ("protect time 1795426200000 1795433400000", "the range ends 2 hours from now"),
        ("protect time 0 1795426200000", "the range lasts more than a day; protect at most 24 hours at once"),
        ("protect time -9223372036854775808 0", "the range lasts more than a day"),
    ])
    func openFarFutureOrLongRangesAreRefused(request: String, message: String) throws {
        let selection = try #require(SegmentSelection(request: request))
        #expect {
            try selection.check(request, now: now)
        } throws: { error in
            "\(error)".hasPrefix("'\(request)': ") && "\(error)".contains(message)
        }
    }

    @Test func aTimeOfDayAheadIsTodaysButRefusedOnceItIsMoreThanFiveMinutesAhead() throws {
        let berlin = TimeZone(identifier: "Europe/Berlin")!  // 10:30 there
        try SegmentSelection.parse("10:25..10:34", now: now, timeZone: berlin).check("10:25..10:34", now: now)
        let later = try SegmentSelection.parse("10:25..10:45", now: now, timeZone: berlin)
        #expect(throws: SelectionError.self) { try later.check("10:25..10:45", now: now) }
    }
}
