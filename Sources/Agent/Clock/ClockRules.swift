import Foundation
import HAL

/// The wall clock's rules: a pure state machine fed, once a second, the clock's offset from the
/// monotonic clock (``WallClock/offset()``), whether the kernel counts it as synchronised, and the
/// reference chrony follows (if chrony runs); it answers when the clock was stepped and where its
/// time comes from. No clock or process of its own; ``ClockService`` runs it.
///
/// - A change of the offset of more than ``WallClock/stepThreshold`` since the last sample is a
///   step (NTP arriving after boot, chrony setting the clock from a GPS fix, a hand with `date`),
///   forward or back. The segmenter starts a new timeline at the next segment on its own; this
///   machine tells it to the log and `status`.
/// - The source is `gps` when the clock is synchronised and chrony's reference is a GPS reference
///   clock (`GPS`, `NMEA`, `PPS`, `SHM…`, `SOCK`), `ntp` when synchronised otherwise, `none` when
///   the kernel says it is not, `unknown` when it cannot say.
public struct ClockRules: Sendable {
    public enum Action: Sendable, Equatable {
        case stepped(seconds: Double)
        case source(from: String, to: String)
    }

    public private(set) var source = "unknown"
    public private(set) var synced: Bool?
    public private(set) var steps = 0
    public private(set) var lastStep: Double?
    private var offset: Double?

    public init() {}

    public mutating func sample(offset: Double, synced: Bool?, reference: String?) -> [Action] {
        var actions: [Action] = []
        if let previous = self.offset, abs(offset - previous) > WallClock.stepThreshold {
            steps += 1
            lastStep = offset - previous
            actions.append(.stepped(seconds: offset - previous))
        }
        self.offset = offset
        self.synced = synced
        let now = Self.source(synced: synced, reference: reference)
        if now != source {
            actions.append(.source(from: source, to: now))
            source = now
        }
        return actions
    }

    /// chrony's names of GPS reference clocks (`refclock SHM 0 refid GPS`, gpsd's `SOCK`, `PPS`).
    public static let gpsReferences = ["GPS", "NMEA", "PPS", "SHM", "SOCK", "GNSS"]

    public static func source(synced: Bool?, reference: String?) -> String {
        switch synced {
        case nil: return "unknown"
        case false?: return "none"
        case true?:
            let name = (reference ?? "").uppercased()
            return gpsReferences.contains { name.hasPrefix($0) } ? "gps" : "ntp"
        }
    }

    /// The reference's name in `chronyc -c tracking`'s line (its second field), if any.
    public static func chronyReference(_ tracking: String) -> String? {
        let fields = tracking.split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count > 2, !fields[1].isEmpty else { return nil }
        return String(fields[1].prefix(64))
    }
}
