import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Testing

/// How segments' GPS tracks become trips, and how a trip is drawn: without a database.
@Suite struct TripRulesTests {
    typealias Position = GPSPosition

    static func second(_ s: Int, lat: Double? = 37.5, lon: Double? = 127, speed: Double? = 10, mode: Int = 3) -> Position {
        Position(t: "2026-11-30T01:00:\(s < 10 ? "0" : "")\(s)\(s % 2 == 0 ? ".000" : "")Z", mode: mode, lat: lat, lon: lon, speed: speed)
    }

    @Test func aSegmentsFixesAreSpacedAndKeepTheFastestSpeedBetween() {
        let gps: [Position] = [
            Self.second(0, speed: 5), Self.second(1, speed: 30), Self.second(2, speed: 6), Self.second(3, speed: 7),
            Self.second(4, speed: 8), Self.second(5, lat: nil, lon: nil, mode: 1), Self.second(6, speed: 1000.5),
            Position(t: "not a time", mode: 3, lat: 37, lon: 127), Self.second(7, speed: 9, mode: 2)
        ]
        let now: Int64 = 1_796_000_400_000  // 2026-11-30T01:00:00Z
        let points = TripRules.points(gps, nowMs: now)
        let seconds: [Int64] = points.map { ($0.atMs - points[0].atMs) / 1000 }
        #expect(seconds == [0, 2, 4, 7])
        // The 30 m/s of second 1 is kept with the point of second 2; an out-of-range speed is no fix.
        #expect(points.map(\.speed) == [5, 30, 8, 9])
        // The car picks its points' times: one far ahead of the server's clock, or far behind it, is
        // not a point of a drive; a speed past any car's is none.
        let future = Position(t: "9999-01-01T00:00:00Z", mode: 3, lat: 37, lon: 127, speed: 10)
        let ancient = Position(t: "2026-10-01T00:00:00Z", mode: 3, lat: 37, lon: 127, speed: 10)
        #expect(TripRules.points([future, ancient], nowMs: now).isEmpty)
        #expect(TripRules.points([Self.second(1, speed: 300)], nowMs: now).map(\.speed) == [0])
    }

    @Test func aPauseEndsATripAndAResentPointIsNotAddedTwice() {
        let t0: Int64 = 1_800_000_000_000
        let a = [TrackPoint(atMs: t0, lat: 37.5, lon: 127, speed: 3), TrackPoint(atMs: t0 + 2_000, lat: 37.501, lon: 127, speed: 20)]
        let (first, added) = TripRules.extend(nil, device: "car", with: a)
        #expect(first.count == 1 && added == a)
        let trip = first[0]
        #expect(abs(trip.distanceMeters - 111.2) < 0.5 && trip.topSpeed == 20 && trip.endMs == t0 + 2_000)
        #expect(TripRules.extend(trip, device: "car", with: a) == ([], []))
        let jump = TrackPoint(atMs: t0 + 3_000, lat: 38.5, lon: 127, speed: 10)
        let (jumped, _) = TripRules.extend(trip, device: "car", with: [jump])
        #expect(jumped.first?.distanceMeters == trip.distanceMeters && jumped.first?.end.lat == 38.5)
        let after = TrackPoint(atMs: t0 + 2_000 + TripRules.pauseMs + 1, lat: 37.6, lon: 127, speed: 0)
        let (next, _) = TripRules.extend(trip, device: "car", with: [after])
        #expect(next.map(\.startMs) == [after.atMs] && next[0].distanceMeters == 0)
        // A trip holds at most its longest hours: a drive on is a new trip.
        var long = trip
        long.endMs = t0 + TripRules.longestMs - 1_000
        let (split, _) = TripRules.extend(
            long, device: "car", with: [TrackPoint(atMs: t0 + TripRules.longestMs + 1, lat: 37.5, lon: 127, speed: 1)])
        #expect(split.map(\.startMs) == [t0 + TripRules.longestMs + 1])
    }

    @Test func aDrawingFitsTheWidthNorthUpWithTheStartAndEndMarked() throws {
        let points = (0...10).map {
            TrackPoint(atMs: Int64($0), lat: 37.5 + Double($0) * 0.001, lon: 127 + Double($0 % 2) * 0.0005, speed: 0)
        }
        let drawing = try #require(TripDrawing(points))
        #expect(drawing.start.y > drawing.end.y, "north is up")
        let xs = drawing.polyline.split(separator: " ").compactMap { Double($0.split(separator: ",")[0]) }
        let ys = drawing.polyline.split(separator: " ").compactMap { Double($0.split(separator: ",")[1]) }
        #expect(
            xs.count == 11 && xs.allSatisfy { (0...TripDrawing.width).contains($0) } && ys.allSatisfy { (0...drawing.height).contains($0) })
        #expect(ys.max()! - ys.min()! == TripDrawing.width - 2 * TripDrawing.margin)
        let many = (0..<5000).map { TrackPoint(atMs: Int64($0), lat: 37 + Double($0) * 1e-5, lon: 127, speed: 0) }
        let thinned = try #require(TripDrawing(many, maxPoints: 2000))
        #expect(thinned.polyline.split(separator: " ").count <= 2001 && thinned.end.y == TripDrawing.margin)
        #expect(TripDrawing([]) == nil)
    }
}
