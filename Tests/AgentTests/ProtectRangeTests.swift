import Agent
import Foundation
import Testing

/// A `protect` time range must end: at most a few minutes ahead, at most a day long. Otherwise
/// every segment still to come is filed as protected, and the protected cap deletes older incidents
/// to make room for them.
@Suite struct ProtectRangeTests {
    let now = Date(timeIntervalSince1970: 1_795_426_200)  // 2026-11-23T09:30:00Z

    func at(_ text: String) -> Date { try! Date(text, strategy: .iso8601) }

    /// `check` answers with an error or nothing: each range is checked at the edge of what is
    /// allowed, and a second past the edge, so the limits themselves are what is tested.
    @Test func rangesUpToFiveMinutesAheadAndADayLongAreAccepted() throws {
        func refusal(_ selection: SegmentSelection) -> String? {
            do { try selection.check("x", now: now); return nil } catch { return "\(error)" }
        }
        #expect(try SegmentSelection.last("2m", now: now) == .time(now.addingTimeInterval(-120)...now))
        #expect(refusal(try SegmentSelection.last("2m", now: now)) == nil)
        #expect(refusal(try SegmentSelection.last("24h", now: now)) == nil)
        #expect(refusal(.time(now...now.addingTimeInterval(SegmentSelection.maxAhead))) == nil)
        #expect(
            refusal(.time(now...now.addingTimeInterval(SegmentSelection.maxAhead + 1)))?.contains("it may end at most 5 minutes ahead")
                == true)
        let dayAgo = now.addingTimeInterval(-SegmentSelection.maxLength)
        #expect(refusal(.time(dayAgo...now)) == nil)
        #expect(refusal(.time(dayAgo.addingTimeInterval(-1)...now))?.contains("protect at most 24 hours at once") == true)
        let parsed = try SegmentSelection.parse("2026-11-20T09:30Z..2026-11-20T09:35Z", now: now)
        #expect(parsed == .time(at("2026-11-20T09:30:00Z")...at("2026-11-20T09:35:00Z")))
        #expect(refusal(parsed) == nil)
        // Sequence numbers name segments already recorded: nothing is left pending.
        #expect(refusal(.sequence(0...Int.max)) == nil)
    }

    @Test(arguments: [
        ("protect time 0 9223372036854775807", "the range ends more than a day from now; it may end at most 5 minutes ahead"),
        ("protect time 1795426200000 1795426501000", "the range ends 6 minutes from now; it may end at most 5 minutes ahead"),
        ("protect time 1795426200000 1795433400000", "the range ends 2 hours from now"),
        ("protect time 0 1795426200000", "the range lasts more than a day; protect at most 24 hours at once"),
        ("protect time -9223372036854775808 0", "the range lasts more than a day")
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
