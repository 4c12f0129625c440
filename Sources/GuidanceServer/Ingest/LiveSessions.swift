import Logging
public import ServiceLifecycle

/// The sessions open on this instance, by session id, and the services that act on them from
/// outside: closing those whose lease another session took (on this instance or another; only
/// the latest view of the road matters, so the older session is the one closed, with 4000),
/// asking each, every ``StreamSession/usagePoll``, whether its token still holds and its usage
/// came back (``SessionChecks``), and telling each that the server is restarting (1012,
/// ``RestartNotice``).
actor LiveSessions {
    private var end: [String: @Sendable (StreamSession.EndReason) -> Void] = [:]
    private var checks: [String: @Sendable () -> Void] = [:]
    /// Set once the server is going down: a session that opens after that is told at once.
    private var restarting = false

    /// `end` only signals the session (it must not wait on the session's socket).
    func add(_ session: String, end: @escaping @Sendable (StreamSession.EndReason) -> Void) {
        if restarting {
            end(.restarting)
        }
        self.end[session] = end
    }

    /// `check` runs on every tick of ``SessionChecks``, for as long as the session is open; it
    /// must only look and signal, never wait.
    func watch(_ session: String, check: @escaping @Sendable () -> Void) {
        checks[session] = check
    }

    func remove(_ session: String) {
        end[session] = nil
        checks[session] = nil
    }

    /// Closes `session` as superseded, if it is still open here.
    func supersede(_ session: String) {
        end.removeValue(forKey: session)?(.superseded)
    }

    /// Tells every open session, and every one that opens from now on, that the server is
    /// restarting. Returns how many were open.
    func restartAll() -> Int {
        restarting = true
        for end in end.values { end(.restarting) }
        return end.count
    }

    /// Runs every open session's check, once.
    func checkAll() {
        for check in checks.values { check() }
    }

    var count: Int { end.count }
}

/// On a graceful shutdown (SIGTERM: a deploy, `systemctl restart`), before the listener stops,
/// every open session is closed with 1012 (service restart), and this waits up to the close
/// deadline for them to end. An agent that hears 1012 reconnects after a random wait up to its
/// `uplink.restartSpreadMs`, so a fleet comes back spread out over seconds; the listener's own
/// shutdown would close them with 1000, which agents answer within 250 ms, all of them together.
///
/// It must be shut down before the HTTP server: in a ``ServiceGroup``, after it in the list.
public struct RestartNotice: Service {
    let sessions: LiveSessions
    let deadline: Duration
    let logger: Logger

    public func run() async throws {
        do { try await gracefulShutdown() } catch { return }
        let open = await sessions.restartAll()
        logger.notice("shutting down: \(open) session(s) told the server is restarting (1012)")
        let until = ContinuousClock.now + deadline
        while await sessions.count > 0, ContinuousClock.now < until {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// One timer for every session's checks, not one per session: with thousands of sessions, a
/// wake-up each every 2 s cost 13–15 % of the server's CPU (BENCHMARKS.md, "One timer for the
/// sessions' checks"). Each tick reads the tokens file if it changed, then only looks (a
/// dictionary read, a lock) and wakes the sessions that have something to do: a token gone, or
/// usage to ask the ledger about.
struct SessionChecks: Service {
    let sessions: LiveSessions
    /// Runs before each tick's checks: what they all read is made current once (the tokens file).
    let beforeEach: @Sendable () -> Void

    func run() async throws {
        // A service that returned would end the server: this one runs until graceful shutdown.
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: StreamSession.usagePoll)
                beforeEach()
                await sessions.checkAll()
            }
        }
    }
}

/// Reads the leases' ``SessionLeases/superseded`` and closes each such session of this instance.
struct SupersedeService: Service {
    let leases: any SessionLeases
    let sessions: LiveSessions
    let logger: Logger

    func run() async throws {
        for await lost in leases.superseded.cancelOnGracefulShutdown() {
            logger.debug("lease of \(lost.device) taken at epoch \(lost.byEpoch); closing session \(lost.session)")
            await sessions.supersede(lost.session)
        }
    }
}
