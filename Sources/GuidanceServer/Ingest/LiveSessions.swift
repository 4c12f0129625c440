import Logging
public import ServiceLifecycle

/// The sessions open on this instance, by session id, and the services that act on them from
/// outside: closing those whose lease another session took (on this instance or another; only
/// the latest view of the road matters, so the older session is the one closed, with 4000), and
/// asking each, every ``StreamSession/usagePoll``, whether its token still holds and its usage
/// came back (``SessionChecks``).
actor LiveSessions {
    private var supersede: [String: @Sendable () -> Void] = [:]
    private var checks: [String: @Sendable () -> Void] = [:]

    /// `supersede` only signals the session (it must not wait on the session's socket).
    func add(_ session: String, supersede: @escaping @Sendable () -> Void) {
        self.supersede[session] = supersede
    }

    /// `check` runs on every tick of ``SessionChecks``, for as long as the session is open; it
    /// must only look and signal, never wait.
    func watch(_ session: String, check: @escaping @Sendable () -> Void) {
        checks[session] = check
    }

    func remove(_ session: String) {
        supersede[session] = nil
        checks[session] = nil
    }

    /// Closes `session` as superseded, if it is still open here.
    func supersede(_ session: String) {
        supersede.removeValue(forKey: session)?()
    }

    /// Runs every open session's check, once.
    func checkAll() {
        for check in checks.values { check() }
    }

    var count: Int { supersede.count }
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
