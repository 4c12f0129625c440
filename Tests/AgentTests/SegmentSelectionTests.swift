import Agent
import Foundation
import Testing

/// What `dashcam-agent protect` accepts, and the line it sends to the agent.
@Suite struct SegmentSelectionTests {
    let now = Date(timeIntervalSince1970: 1_795_426_200)  // 2026-11-23T09:30:00Z
    let berlin = TimeZone(identifier: "Europe/Berlin")!

    func at(_ text: String) -> Date {
        try! Date(text, strategy: .iso8601)
    }

    @Test func sequenceNumbersAndRanges() throws {
        #expect(try SegmentSelection.parse("42") == .sequence(42...42))
        #expect(try SegmentSelection.parse("40..45") == .sequence(40...45))
    }

    @Test func timesInTheirZoneOrTheDevicesLocalTime() throws {
        #expect(
            try SegmentSelection.parse("2026-11-23T09:30:00Z..2026-11-23T09:35:00Z", now: now)
                == .time(at("2026-11-23T09:30:00Z")...at("2026-11-23T09:35:00Z")))
        // No zone: the device's local time (Berlin is UTC+1 in November).
        #expect(
            try SegmentSelection.parse("2026-11-23T10:30..2026-11-23 10:35:30", now: now, timeZone: berlin)
                == .time(at("2026-11-23T09:30:00Z")...at("2026-11-23T09:35:30Z")))
        #expect(try SegmentSelection.parse("10:25..now", now: now, timeZone: berlin) == .time(at("2026-11-23T09:25:00Z")...now))
        #expect(
            try SegmentSelection.parse("2026-11-23T12:00+02:30", now: now) == .time(at("2026-11-23T09:30:00Z")...at("2026-11-23T09:30:00Z"))
        )
        #expect(try SegmentSelection.last("2m", now: now) == .time(now.addingTimeInterval(-120)...now))
    }

    @Test func aTimeOfDayIsTheLatestOneInItsOwnZone() throws {
        // Today's, up to an hour ahead (a range still being recorded) …
        #expect(
            try SegmentSelection.parse("10:20..10:45", now: now, timeZone: berlin)
                == .time(at("2026-11-23T09:20:00Z")...at("2026-11-23T09:45:00Z")))
        // … further ahead, yesterday's.
        #expect(
            try SegmentSelection.parse("12:00", now: now, timeZone: berlin)
                == .time(at("2026-11-22T11:00:00Z")...at("2026-11-22T11:00:00Z")))
        // Just after midnight, 23:55 is last night's, and a range may cross midnight.
        let justAfterMidnight = at("2026-11-22T23:03:00Z")  // 00:03 in Berlin
        #expect(
            try SegmentSelection.parse("23:55", now: justAfterMidnight, timeZone: berlin)
                == .time(at("2026-11-22T22:55:00Z")...at("2026-11-22T22:55:00Z")))
        #expect(
            try SegmentSelection.parse("23:58..00:02", now: justAfterMidnight, timeZone: berlin)
                == .time(at("2026-11-22T22:58:00Z")...at("2026-11-22T23:02:00Z")))
        // A zone names the day in that zone: at 00:03 in Berlin it is still the 22nd in UTC.
        #expect(
            try SegmentSelection.parse("22:30Z..now", now: justAfterMidnight, timeZone: berlin)
                == .time(at("2026-11-22T22:30:00Z")...justAfterMidnight))
        #expect(
            try SegmentSelection.parse("07:30+09:00", now: justAfterMidnight, timeZone: berlin)
                == .time(at("2026-11-22T22:30:00Z")...at("2026-11-22T22:30:00Z")))
    }

    @Test func theRequestLineRoundTrips() throws {
        for selection in [SegmentSelection.sequence(3...9), try SegmentSelection.parse("09:00:01.250..09:10", now: now)] {
            #expect(SegmentSelection(request: selection.request) == selection, "\(selection.request)")
        }
        #expect(SegmentSelection(request: "protect seq 9 3") == nil)
        #expect(SegmentSelection(request: "protect all") == nil)
        // Any number the socket is sent stays a number on the way back.
        let far = try #require(SegmentSelection(request: "protect time 0 9223372036854775807"))
        #expect(far.request == "protect time 0 9223372036854775807")
    }

    @Test(arguments: [
        ("", "expected a sequence number"),
        ("45..40", "the first not after the last"),
        ("-3", "sequence numbers are 0 or more"),
        ("09:35..09:30", "a range across midnight lasts 12 hours at most"),
        ("2026-11-23T09:35..2026-11-23T09:30", "the range ends before it starts"),
        ("25:00", "'25:00' is not a time"),
        ("2026-02-30T10:00", "is not a time"),
        ("yesterday", "'yesterday' is not a time"),
        ("1..2..3", "expected a sequence number")
    ])
    func badSelectionsSayWhatIsAccepted(text: String, message: String) {
        #expect {
            try SegmentSelection.parse(text, now: now)
        } throws: { error in
            "\(error)".contains(message) && "\(error)".contains("'\(text)'")
        }
    }

    @Test func badDurations() {
        for text in ["0m", "2d", "m", "25h", "-5s", "9999999999999999h"] {
            #expect(throws: SelectionError.self, "\(text)") { try SegmentSelection.last(text, now: now) }
        }
    }
}
