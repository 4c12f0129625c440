extension StreamSession {
    /// When a quiet session is pinged or closed; pure, the time is passed in.
    ///
    /// - Nothing at all heard (no message, no pong) for the idle timeout: closed. Half way through a
    ///   silence it is pinged once, so an agent that is alive but has nothing to send (paused by
    ///   4402, say) answers and stays.
    /// - No `hello` within the handshake timeout of the upgrade, pings or not: closed. While it
    ///   starts, a session holds one of the places of `server.maxUpgradesInProgress`.
    /// - A segment that has room in the ``InFlightBudget`` but has not arrived within twice the idle
    ///   timeout: closed, so that a car cannot hold room by trickling bytes.
    ///
    /// Each closing is 4001.
    struct IdleRules: Sendable {
        typealias Instant = ContinuousClock.Instant

        let idleTimeout: Duration
        /// When the `hello` must have come (the upgrade plus the handshake timeout).
        let startBy: Instant
        /// How long a segment's room may be held.
        let segmentDeadline: Duration

        /// What the session's watch does next.
        enum Step: Sendable, Equatable {
            /// Close with 4001; `reason` for the close frame, `why` for the log.
            case close(reason: String, why: String)
            case ping
            case sleep(until: Instant)
        }

        /// `lastHeard`: the last bytes read from the agent; `started`: its `hello` was taken;
        /// `roomSince`: since when its segment's room is held; `pinged`: the last ping sent.
        func next(now: Instant, lastHeard: Instant, started: Bool, roomSince: Instant?, pinged: Instant?) -> Step {
            if !started, now >= startBy {
                return .close(reason: "no hello", why: "no hello within server.handshakeTimeoutMs of the upgrade")
            }
            if let roomSince, now >= roomSince + segmentDeadline {
                return .close(
                    reason: "segment too slow", why: "its segment did not arrive within \(Self.seconds(segmentDeadline)) of having room")
            }
            if now >= lastHeard + idleTimeout {
                return .close(reason: "idle", why: "nothing heard for \(Self.seconds(idleTimeout))")
            }
            let halfWay = lastHeard + idleTimeout / 2
            if now >= halfWay, pinged.map({ $0 < lastHeard }) ?? true { return .ping }
            var wake = now < halfWay ? halfWay : lastHeard + idleTimeout
            if let roomSince { wake = min(wake, roomSince + segmentDeadline) }
            if !started { wake = min(wake, startBy) }
            return .sleep(until: wake)
        }

        /// `60 s`, for the log.
        static func seconds(_ duration: Duration) -> String { "\(duration.components.seconds) s" }
    }
}
