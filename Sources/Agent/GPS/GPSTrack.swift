public import Foundation
public import GuidanceProtocol
public import HAL
import Synchronization
import UTC

/// The fixes of the last minutes, a point a second by the agent's clock: what each segment's
/// track is cut from, and what `status` shows. Pure: the times are passed in.
public struct GPSTrack: Sendable {
    /// How far back points are kept.
    public static let memory: TimeInterval = 600
    /// A fix older than this is no longer the car's position (gpsd sends one a second).
    public static let stale: TimeInterval = 3

    /// Oldest first, at most one per second of `at` (the agent's clock when it came).
    public private(set) var points: [(at: Date, point: GPSPosition)] = []
    public private(set) var last: (fix: GPSFix, at: Date)?

    public init() {}

    /// A fix as it comes: the second's point (a later fix in the same second replaces it).
    public mutating func add(_ fix: GPSFix, at: Date) {
        last = (fix, at)
        let time = UTCTime(fix.time ?? at).rfc3339
        let point = GPSPosition(
            t: time, mode: fix.mode, lat: fix.hasPosition ? fix.lat : nil, lon: fix.hasPosition ? fix.lon : nil,
            alt: fix.mode >= 3 ? fix.altitude : nil, speed: fix.speed, track: fix.track)
        let second = at.timeIntervalSince1970.rounded(.down)
        if let newest = points.last, newest.at.timeIntervalSince1970.rounded(.down) == second {
            points[points.count - 1] = (at, point)
        } else if let newest = points.last, at < newest.at {
            // The clock went back: what came before is of another timeline.
            points = [(at, point)]
        } else {
            points.append((at, point))
        }
        let horizon = at.addingTimeInterval(-Self.memory)
        if let first = points.firstIndex(where: { $0.at >= horizon }), first > 0 { points.removeFirst(first) }
    }

    /// The points that came within `from ..< to`, oldest first.
    public func points(from: Date, to: Date) -> [GPSPosition] {
        points.filter { $0.at >= from && $0.at < to }.map(\.point)
    }

    /// The fix now, if the last one is recent.
    public func current(now: Date) -> GPSFix? {
        guard let last, now.timeIntervalSince(last.at) <= Self.stale, last.at <= now.addingTimeInterval(1) else { return nil }
        return last.fix
    }
}

/// ``GPSTrack`` shared between the GPS service, which adds to it, and the capture thread, which
/// reads a segment's track when it closes.
public final class GPSTrackStore: Sendable {
    private let track = Mutex(GPSTrack())

    public init() {}

    public func add(_ fix: GPSFix, at: Date = Date()) { track.withLock { $0.add(fix, at: at) } }

    public func points(from: Date, to: Date) -> [GPSPosition] { track.withLock { $0.points(from: from, to: to) } }

    public func current(now: Date = Date()) -> GPSFix? { track.withLock { $0.current(now: now) } }
}
