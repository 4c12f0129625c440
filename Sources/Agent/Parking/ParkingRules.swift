/// When the car is parked: the ignition input, debounced, and the delay before parking mode.
///
/// A pure machine with the time passed in (`CLOCK_MONOTONIC` nanoseconds):
/// - a level counts once it has held for `debounce` (a starter motor's dip, a loose contact,
///   an opto-coupler's bounce are not a change);
/// - ignition off for `delay` after that change parks the car (a stop at a fuel station with the
///   engine off for less does not);
/// - ignition on drives again at once: the driver is about to move;
/// - the events saved while parked are counted, and told when driving resumes.
///
/// The mode starts as driving: recording starts at once at boot, and an ignition that is off
/// from the start parks the car `delay` after its level was first read.
public struct ParkingRules: Sendable {
    public enum Mode: String, Sendable, Equatable {
        case driving, parked
    }

    public enum Action: Sendable, Equatable {
        /// Stop continuous recording and the uplink; watch the parked car.
        case park
        /// Resume driving mode; `events` clips were saved while parked.
        case drive(events: Int)
    }

    public struct Settings: Sendable, Equatable {
        public var debounceNs: UInt64
        public var delayNs: UInt64
    }

    public let settings: Settings
    public private(set) var mode: Mode = .driving
    /// The debounced ignition (nil until a level has held for the debounce time).
    public private(set) var ignition: Bool?
    /// Clips saved in the current parking (0 while driving).
    public private(set) var events = 0
    /// The raw level last read, and since when it has been that.
    private var raw: (level: Bool, since: UInt64)?
    /// When the debounced ignition went off.
    private var offSince: UInt64?

    public init(settings: Settings) {
        self.settings = settings
    }

    /// The input's level read at `now` (after an edge, or a periodic read).
    public mutating func read(_ level: Bool, at now: UInt64) -> [Action] {
        if raw?.level != level { raw = (level, now) }
        return tick(at: now)
    }

    /// Time passing: call at ``nextDeadline`` (and after each read).
    public mutating func tick(at now: UInt64) -> [Action] {
        if let raw, raw.level != ignition, now >= raw.since &+ settings.debounceNs {
            ignition = raw.level
            offSince = raw.level ? nil : raw.since
        }
        switch (mode, ignition) {
        case (.parked, true?):
            mode = .driving
            defer { events = 0 }
            return [.drive(events: events)]
        case (.driving, false?):
            guard let offSince, now >= offSince &+ settings.delayNs else { return [] }
            mode = .parked
            events = 0
            return [.park]
        default:
            return []
        }
    }

    /// A clip was saved while parked.
    public mutating func eventSaved() {
        if mode == .parked { events += 1 }
    }

    /// When ``tick(at:)`` has something to decide: the end of a debounce or of the delay.
    public var nextDeadline: UInt64? {
        if let raw, raw.level != ignition { return raw.since &+ settings.debounceNs }
        if mode == .driving, ignition == false, let offSince { return offSince &+ settings.delayNs }
        return nil
    }
}
