extension ImpactMail {
    /// At most `maxPerHour` mails per car in any hour (a sliding window), with the time passed in
    /// (`CLOCK_MONOTONIC` nanoseconds, as ``RateLimit``). Only admitted mails count.
    struct Rate: Sendable {
        let maxPerHour: Int
        static let window: UInt64 = 3600 * 1_000_000_000
        /// Cars remembered before those with nothing in the window are forgotten.
        static let pruneAbove = 4096
        private var sent: [String: [UInt64]] = [:]

        init(maxPerHour: Int) { self.maxPerHour = maxPerHour }

        /// Whether a mail about `device` may go at `now`; if so, it counts from now on.
        mutating func admit(device: String, now: UInt64) -> Bool {
            var times = (sent[device] ?? []).filter { Self.within($0, now) }
            defer { sent[device] = times.isEmpty ? nil : times }
            guard times.count < maxPerHour else { return false }
            times.append(now)
            if sent.count > Self.pruneAbove {
                sent = sent.filter { $0.value.contains { Self.within($0, now) } }
            }
            return true
        }

        /// Cars with a mail in the window (for tests: the memory stays bounded).
        var carsRemembered: Int { sent.count }

        private static func within(_ time: UInt64, _ now: UInt64) -> Bool {
            time > now || now - time < window
        }
    }
}
