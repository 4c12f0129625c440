/// The clips of a parked car: a pure machine over frame times and triggers.
///
/// While nothing happens, frames are held as the pre-roll: the last `preRoll` of them. A
/// trigger (motion or an impact) starts a clip with the pre-roll, and the clip runs to `after`
/// past the last trigger; triggers within it extend it, up to `maxLength` in all. The next
/// trigger after it starts a new clip.
public struct ParkedClipRules: Sendable {
    public enum Trigger: String, Sendable, Equatable, Codable {
        case motion, impact
    }

    public struct Settings: Sendable, Equatable {
        public var preRollNs: UInt64
        public var afterNs: UInt64
        public var maxLengthNs: UInt64 = 60_000_000_000

        /// The length of the segment a clip is written as: a clip is one segment, one GOP.
        public var clipSegmentSeconds: Int { Int(maxLengthNs / 1_000_000_000) + 1 }
    }

    public enum Decision: Sendable, Equatable {
        /// Keep the frame in the pre-roll; drop pre-roll frames older than `dropBefore`.
        case hold(dropBefore: UInt64)
        /// Start a clip: the pre-roll frames, then this one.
        case start(Trigger)
        /// Add the frame to the clip.
        case record
        /// Add the frame, and the clip is over.
        case end
    }

    public let settings: Settings
    /// The clip being recorded: when its first frame (the oldest of the pre-roll) was, and until when it runs.
    public private(set) var clip: (start: UInt64, until: UInt64, trigger: Trigger)?

    /// A frame captured at `time`, with what triggered at it (nil: nothing); `preRollStart` is
    /// the time of the oldest frame held (the frame's own time if none).
    public mutating func frame(at time: UInt64, trigger: Trigger?, preRollStart: UInt64) -> Decision {
        guard let current = clip else {
            guard let trigger else {
                return .hold(dropBefore: time >= settings.preRollNs ? time - settings.preRollNs : 0)
            }
            let start = min(preRollStart, time)
            clip = (start, min(time &+ settings.afterNs, start &+ settings.maxLengthNs), trigger)
            return .start(trigger)
        }
        if trigger != nil {
            clip?.until = min(max(current.until, time &+ settings.afterNs), current.start &+ settings.maxLengthNs)
        }
        if time >= clip!.until {
            clip = nil
            return .end
        }
        return .record
    }

    /// Ends the clip in progress without a frame (driving resumes, the camera went away).
    public mutating func cut() -> Bool {
        defer { clip = nil }
        return clip != nil
    }
}
