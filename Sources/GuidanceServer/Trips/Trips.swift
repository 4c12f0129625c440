import Foundation
public import GuidanceProtocol
import UTC

/// A point of a car's drive as the server keeps it: when (the GPS's own time), where, and the
/// fastest speed since the point before (m/s).
public struct TrackPoint: Sendable, Equatable {
    public var atMs: Int64
    public var lat: Double
    public var lon: Double
    public var speed: Double
}

/// One drive: from the first point after a pause to the last before the next one.
public struct Trip: Sendable, Equatable {
    public var device: String
    public var startMs: Int64
    public var endMs: Int64
    public var distanceMeters: Double
    /// The fastest speed a point reported (m/s).
    public var topSpeed: Double
    public var start: (lat: Double, lon: Double)
    public var end: (lat: Double, lon: Double)

    public static func == (a: Trip, b: Trip) -> Bool {
        a.device == b.device && a.startMs == b.startMs && a.endMs == b.endMs && a.distanceMeters == b.distanceMeters
            && a.topSpeed == b.topSpeed
            && a.start == b.start && a.end == b.end
    }
}

/// How segments' GPS tracks become trips, pure (times are the points' own).
///
/// - A point counts with a fix and a position and a time that reads as RFC 3339, no later than
///   ``aheadMs`` after the server's clock and no earlier than ``behindMs`` before it: the car
///   chooses its points' times, so a time far off cannot freeze its trips (a point before a
///   trip's end is not added) or keep them from the retention sweep.
/// - A speed over ``maxSpeed`` is no speed (it is not the top speed).
/// - Points are kept at most one per ``spacingMs`` (each with the fastest speed since the last
///   one kept): a drive's shape at a fraction of its seconds.
/// - A pause longer than ``pauseMs`` (parked, or no fix for that long) ends a trip; the next point
///   starts a new one. So does a trip's ``longestMs``: no trip holds more than its hours' points.
/// - A jump faster than ``maxSpeed`` between two points is a bad fix: it adds no distance.
/// - A point at or before the trip's end (a segment re-sent, or a clock that went back) is not
///   added again.
public enum TripRules {
    public static let pauseMs: Int64 = 10 * 60_000
    public static let spacingMs: Int64 = 2_000
    /// 100 m/s: faster than any car.
    public static let maxSpeed = 100.0
    public static let longestMs: Int64 = 12 * 3_600_000
    public static let aheadMs: Int64 = 5 * 60_000
    /// A car that was offline uploads what it recorded since: a month of it.
    public static let behindMs: Int64 = 31 * 86_400_000

    /// A segment's track as points to keep, oldest first, spaced; `nowMs` is the server's clock.
    public static func points(_ gps: [GPSPosition], nowMs: Int64) -> [TrackPoint] {
        var fixes: [TrackPoint] = []
        for position in gps where position.mode >= 2 && position.isValid {
            guard let lat = position.lat, let lon = position.lon, let at = Date(rfc3339: position.t) else { continue }
            let atMs = Int64((at.timeIntervalSince1970 * 1000).rounded())
            guard atMs <= nowMs + aheadMs, atMs >= nowMs - behindMs else { continue }
            let speed = position.speed.flatMap { $0 <= maxSpeed ? $0 : nil } ?? 0
            fixes.append(TrackPoint(atMs: atMs, lat: lat, lon: lon, speed: speed))
        }
        fixes.sort { $0.atMs < $1.atMs }
        var kept: [TrackPoint] = []
        var fastest = 0.0
        for fix in fixes {
            fastest = max(fastest, fix.speed)
            if let last = kept.last, fix.atMs - last.atMs < spacingMs { continue }
            kept.append(TrackPoint(atMs: fix.atMs, lat: fix.lat, lon: fix.lon, speed: fastest))
            fastest = 0
        }
        if fastest > 0, let last = kept.indices.last { kept[last].speed = max(kept[last].speed, fastest) }
        return kept
    }

    /// What `points` (spaced, oldest first) do to the car's trips after `last`, its newest: the
    /// trips that changed (that one grown, then any new ones; each to be written whole) and the
    /// points that count.
    public static func extend(_ last: Trip?, device: String, with points: [TrackPoint]) -> (changed: [Trip], added: [TrackPoint]) {
        var trips = last.map { [$0] } ?? []
        var changed = IndexSet()
        var added: [TrackPoint] = []
        for point in points {
            if let trip = trips.last, point.atMs <= trip.endMs { continue }
            if var trip = trips.last, point.atMs - trip.endMs <= pauseMs, point.atMs - trip.startMs <= longestMs {
                let meters = distance(trip.end, (point.lat, point.lon))
                if meters / (Double(point.atMs - trip.endMs) / 1000) <= maxSpeed { trip.distanceMeters += meters }
                trip.endMs = point.atMs
                trip.end = (point.lat, point.lon)
                trip.topSpeed = max(trip.topSpeed, point.speed)
                trips[trips.count - 1] = trip
            } else {
                trips.append(
                    Trip(
                        device: device, startMs: point.atMs, endMs: point.atMs, distanceMeters: 0, topSpeed: point.speed,
                        start: (point.lat, point.lon), end: (point.lat, point.lon)))
            }
            changed.insert(trips.count - 1)
            added.append(point)
        }
        return (changed.map { trips[$0] }, added)
    }

    /// Metres along the earth between two points (haversine, mean radius).
    public static func distance(_ a: (lat: Double, lon: Double), _ b: (lat: Double, lon: Double)) -> Double {
        let rad = Double.pi / 180
        let dLat = (b.lat - a.lat) * rad, dLon = (b.lon - a.lon) * rad
        let h = sin(dLat / 2) * sin(dLat / 2) + cos(a.lat * rad) * cos(b.lat * rad) * sin(dLon / 2) * sin(dLon / 2)
        return 2 * 6_371_008.8 * asin(min(1, h.squareRoot()))
    }
}
