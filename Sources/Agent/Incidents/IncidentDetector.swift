import Foundation
public import HAL

/// How hard a shock must be to save an incident (`incident.sensitivity`), on gravity-removed
/// acceleration averaged over ``IncidentDetector/Settings/smoothing``: across the road's plane
/// (braking, a collision, a swerve) and up-down (potholes, speed bumps, which shake a car more
/// than anything that matters). Vendors' dashcams likewise take up-down shocks less seriously.
public enum IncidentSensitivity: String, CaseIterable, Sendable {
    case high, medium, low, off

    /// Least g across, and up-down; nil when off.
    public var thresholds: (across: Double, upDown: Double)? {
        switch self {
        case .high: (0.5, 1.0)
        case .medium: (1.0, 2.0)
        case .low: (2.0, 4.0)
        case .off: nil
        }
    }

    /// For the key table: each level in g.
    public static var documentation: String {
        allCases.map { level in
            level.thresholds.map { "`\(level.rawValue)` \($0.across.formatted) g across / \($0.upDown.formatted) g up-down" } ?? "`off`"
        }.joined(separator: ", ")
    }
}

private extension Double {
    var formatted: String { self == rounded() ? String(Int(self)) : String(self) }
}

/// The G-sensor's rules: a pure state machine, fed the accelerometer's readings (with their own
/// times) and the clock, answering with what to protect and when an incident is over. No clock,
/// file or thread of its own; ``IncidentService`` runs it.
///
/// - Gravity is learnt from the readings (an average over ``Settings/gravitySeconds``), so the
///   sensor may be mounted at any angle; what is left is split into up-down (along gravity) and
///   across (the rest), each averaged over ``Settings/smoothing`` so that a single sample's
///   spike (a door slam, a loose mount) does not count.
/// - A reading over the sensitivity's thresholds is an impact. The first opens an incident from
///   `before` ahead of it to `after` behind it; another impact while it is open extends it to
///   `after` behind the last reading over the thresholds, up to ``Settings/maxLength`` in all
///   (repeated impacts of one crash are one incident). An impact is counted as new once the
///   readings have been under the thresholds for ``Settings/quiet``.
/// - The incident closes when its end has passed; its peak is the largest gravity-removed
///   acceleration read from its first impact to its end.
public struct IncidentDetector: Sendable {
    public struct Settings: Sendable, Equatable {
        public var sensitivity: IncidentSensitivity
        public var before: Duration
        public var after: Duration
        public var maxLength: Duration = .seconds(60)
        public var smoothing: Duration = .milliseconds(60)
        public var gravitySeconds = 2.0
        public var quiet: Duration = .seconds(1)
        /// Readings further apart than this start gravity afresh (the sensor stalled, the agent
        /// was paused).
        public var gap: Duration = .seconds(2)
    }

    /// Times are ``MonotonicClock`` nanoseconds, as the readings carry them.
    public struct Incident: Sendable, Equatable {
        /// Counts from 1 for each detector.
        public var number: Int
        public var firstImpact: UInt64
        public var start: UInt64
        public var end: UInt64
        public var impacts: Int
        /// Largest gravity-removed acceleration, g.
        public var peakG: Double
    }

    public enum Action: Sendable, Equatable {
        /// An impact opened an incident: protect what is recorded from its start to its end.
        case opened(Incident)
        /// Another impact moved its end.
        case extended(Incident)
        /// Its end has passed.
        case closed(Incident)
    }

    public var settings: Settings
    public private(set) var open: Incident?
    private var opened = 0
    private var gravity: (x: Double, y: Double, z: Double)?
    private var lastAt: UInt64?
    /// Up-down and across of the readings within the smoothing window, oldest first.
    private var recent: [(at: UInt64, upDown: Double, across: Double)] = []
    /// When the readings were last over the thresholds.
    private var overAt: UInt64?
    /// The open incident's end as last told in an action.
    private var announcedEnd: UInt64 = 0
    private static let second: UInt64 = 1_000_000_000

    public init(settings: Settings) {
        self.settings = settings
    }

    /// When ``tick(now:)`` next has something to do: the open incident's end.
    public var deadline: UInt64? { open?.end }

    public mutating func read(_ sample: Acceleration) -> [Action] {
        var actions = tick(now: sample.at)
        let at = sample.at
        if let lastAt, at <= lastAt { return actions }  // out of order: the clock is the sensor's
        if let lastAt, at - lastAt > Self.ns(settings.gap) {
            gravity = nil
            recent.removeAll()
        }
        lastAt = at
        guard var g = gravity else {
            gravity = (sample.x, sample.y, sample.z)
            return actions
        }
        // The dynamic part, against gravity as learnt before this reading.
        let d = (x: sample.x - g.x, y: sample.y - g.y, z: sample.z - g.z)
        let norm = (g.x * g.x + g.y * g.y + g.z * g.z).squareRoot()
        let upDown = norm > 0 ? (d.x * g.x + d.y * g.y + d.z * g.z) / norm : 0
        let magnitude = (d.x * d.x + d.y * d.y + d.z * d.z).squareRoot()
        let across = max(0, magnitude * magnitude - upDown * upDown).squareRoot()
        let weight = 1 - exp(-Double(at - (recent.last?.at ?? at)) / 1e9 / settings.gravitySeconds)
        g = (g.x + (sample.x - g.x) * weight, g.y + (sample.y - g.y) * weight, g.z + (sample.z - g.z) * weight)
        gravity = g

        recent.append((at, abs(upDown), across))
        let from = at >= Self.ns(settings.smoothing) ? at - Self.ns(settings.smoothing) : 0
        recent.removeAll { $0.at < from }
        let meanUpDown = recent.reduce(0) { $0 + $1.upDown } / Double(recent.count)
        let meanAcross = recent.reduce(0) { $0 + $1.across } / Double(recent.count)

        if var incident = open {
            incident.peakG = max(incident.peakG, magnitude)
            open = incident
        }
        guard let limits = settings.sensitivity.thresholds,
            meanAcross >= limits.across || meanUpDown >= limits.upDown
        else { return actions }
        let isNew = overAt.map { at - $0 >= Self.ns(settings.quiet) } ?? true
        overAt = at
        if var incident = open {
            // Every reading over the thresholds moves the end; the service hears of a new impact,
            // or of the end moved by a second or more since it last heard.
            let end = min(max(incident.end, at + Self.ns(settings.after)), incident.start + Self.ns(settings.maxLength))
            if isNew { incident.impacts += 1 }
            incident.end = end
            open = incident
            if end > announcedEnd, isNew || end - announcedEnd >= Self.second {
                announcedEnd = end
                actions.append(.extended(incident))
            }
        } else {
            opened += 1
            let start = at >= Self.ns(settings.before) ? at - Self.ns(settings.before) : 0
            let incident = Incident(
                number: opened, firstImpact: at, start: start,
                end: min(at + Self.ns(settings.after), start + Self.ns(settings.maxLength)),
                impacts: 1, peakG: magnitude)
            open = incident
            announcedEnd = incident.end
            actions.append(.opened(incident))
        }
        return actions
    }

    /// Closes the open incident once its end has passed.
    public mutating func tick(now: UInt64) -> [Action] {
        guard let incident = open, now >= incident.end else { return [] }
        open = nil
        return [.closed(incident)]
    }

    static func ns(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds / 1_000_000_000))
    }
}
