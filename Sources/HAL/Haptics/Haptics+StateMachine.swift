extension Haptics {
    /// When each edge of a pattern is due and what it sets: ``Haptics``'s timing rules with no
    /// line, thread or clock. Times are `CLOCK_MONOTONIC` nanoseconds, passed in.
    ///
    /// - A pattern starts with its first pulse on; a pattern still playing is cut short first (the
    ///   line goes inactive, then the new pulse starts), so two pulses never merge into one.
    /// - Every time counts from the moment the edge before it was set, so a late wake-up shifts
    ///   the rest of the pattern but never shortens a pulse or a gap.
    /// - A trailing gap changes nothing: the pattern is over when its last pulse ends.
    ///
    /// The player sets each edge on its line and reports it done (``started(_:at:)``,
    /// ``edgeSet(at:)``); an edge that failed is reported with ``stopped(lineActive:)``.
    struct StateMachine {
        struct Playing: Equatable {
            var pattern: HapticPattern
            /// Index in `pattern.milliseconds` of the time running now: even while a pulse is
            /// on, odd in a gap.
            var step: Int
            /// When that time is up.
            var due: UInt64
        }

        private(set) var playing: Playing?
        /// As the last edge that worked left the line.
        private(set) var lineActive = false

        /// When the next edge is due; nil while nothing plays.
        var due: UInt64? { playing?.due }

        /// The level the due edge sets: a pulse ends (false) or the next one starts (true).
        var nextLevel: Bool? { playing.map { $0.step % 2 == 1 } }

        /// Whether a start must first drive the line inactive (a pulse is still on).
        var mustEndPulseFirst: Bool { lineActive }

        /// The pattern's first pulse was set on at `edge`. Returns the pattern it cut short.
        mutating func started(_ pattern: HapticPattern, at edge: UInt64) -> HapticPattern? {
            let cut = playing?.pattern
            lineActive = true
            playing = Playing(pattern: pattern, step: 0, due: edge + Self.nanoseconds(pattern.milliseconds[0]))
            return cut
        }

        /// The due edge (``nextLevel``) was set at `now`. True when the pattern is over.
        mutating func edgeSet(at now: UInt64) -> Bool {
            guard var current = playing else { return false }
            let steps = current.pattern.milliseconds
            let active = current.step % 2 == 1
            lineActive = active
            current.step += 1
            guard active || current.step + 1 < steps.count else {
                playing = nil
                return true
            }
            current.due = now + Self.nanoseconds(steps[current.step])
            playing = current
            return false
        }

        /// The pattern stopped (an edge failed, or the player is closing); `lineActive` is where
        /// the line was left.
        mutating func stopped(lineActive: Bool) {
            playing = nil
            self.lineActive = lineActive
        }

        /// The line was driven inactive outside a pattern.
        mutating func lineSetInactive() {
            lineActive = false
        }

        static func nanoseconds(_ milliseconds: Int) -> UInt64 { UInt64(milliseconds) * 1_000_000 }
    }
}
