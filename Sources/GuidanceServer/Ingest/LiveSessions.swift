import Logging
public import ServiceLifecycle

/// The sessions open on this instance, by session id, and the service that closes those whose
/// lease another session took (on this instance or another): only the latest view of the road
/// matters, so the older session is the one closed, with 4000.
actor LiveSessions {
    private var supersede: [String: @Sendable () -> Void] = [:]

    /// `supersede` only signals the session (it must not wait on the session's socket).
    func add(_ session: String, supersede: @escaping @Sendable () -> Void) {
        self.supersede[session] = supersede
    }

    func remove(_ session: String) { supersede[session] = nil }

    /// Closes `session` as superseded, if it is still open here.
    func supersede(_ session: String) {
        supersede.removeValue(forKey: session)?()
    }

    var count: Int { supersede.count }
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
