@testable import Agent
import Foundation
import HAL
import Testing

/// An incident keeps one id from the moment it opens to the moment it is saved, whatever the
/// wall clock reads meanwhile: on a busy board converting its monotonic time again at each record
/// came out a millisecond later, and `status` listed the incident twice.
struct IncidentFirstImpactTests {
    /// A wall clock that is 1 ms later at every reading, as a slow board's can be.
    final class DriftingClock: @unchecked Sendable {
        private var calls = 0
        func wall(_ monotonic: UInt64) -> Date {
            calls += 1
            return Date(timeIntervalSince1970: 1_800_000_000 + Double(monotonic) / 1e9 + Double(calls) / 1000)
        }
    }

    @Test func anIncidentKeepsItsFirstImpactsTimeFromOpenedToClosed() throws {
        // Two shocks 2 s apart (one incident, extended), then, once it has closed, a third.
        let readings = IncidentDetectorTests.readings(hz: 10, seconds: 24) { t in
            (3..<4).contains(t) || (6..<7).contains(t) || (18..<19).contains(t) ? (0, 2, 0) : (0, 0, 0)
        }
        var detector = IncidentDetector(settings: .init(sensitivity: .medium, before: .seconds(4), after: .seconds(4)))
        var actions: [IncidentDetector.Action] = []
        for reading in readings { actions += detector.read(reading) }
        actions += detector.tick(now: (readings.last?.at ?? 0) + 60 * IncidentDetectorTests.second)

        let clock = DriftingClock()
        var firstImpacts = IncidentService.FirstImpacts(wallClock: clock.wall)
        var times: [Int: Set<Date>] = [:]
        var kinds: [Int: [String]] = [:]
        for action in actions {
            let incident: IncidentDetector.Incident
            switch action {
            case .opened(let i): incident = i; kinds[i.number, default: []].append("opened")
            case .extended(let i): incident = i; kinds[i.number, default: []].append("extended")
            case .closed(let i): incident = i; kinds[i.number, default: []].append("closed")
            }
            times[incident.number, default: []].insert(firstImpacts.time(of: action))
        }
        #expect(kinds[1]?.first == "opened" && kinds[1]?.contains("extended") == true && kinds[1]?.last == "closed", "\(kinds)")
        #expect(kinds[2] == ["opened", "closed"], "\(kinds)")
        // Each incident one time, though the clock read later at every record.
        #expect(times[1]?.count == 1 && times[2]?.count == 1, "\(times)")
        #expect(times[1] != times[2])
        // Read again instead, the same incident's time moves: what listed it twice.
        let first = try #require(actions.first.flatMap { if case .opened(let i) = $0 { i } else { nil } })
        #expect(clock.wall(first.firstImpact) != clock.wall(first.firstImpact))
    }
}
