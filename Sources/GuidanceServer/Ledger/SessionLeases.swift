/// Which session owns each device's stream, across every server instance that shares the store.
///
/// One instance alone keeps leases in memory (``LocalLeases``); instances behind one proxy keep
/// them in PostgreSQL (``PostgresLeases``): a lease row per device whose epoch grows with every
/// new session, and a notification that tells the old owner to close its session with 4000.
public protocol SessionLeases: Sendable {
    /// Makes `session` (on this instance) the device's session and returns its epoch, greater than
    /// every epoch the device had before. The previous owner, on whichever instance, is told
    /// through ``superseded``.
    func acquire(device: String, session: String) async throws -> Int64
    /// Gives the lease up if `session` still holds it at `epoch`; otherwise does nothing.
    func release(device: String, session: String, epoch: Int64) async throws
    /// Sessions of this instance that lost their lease: close each with 4000.
    var superseded: AsyncStream<SupersededSession> { get }
}

public struct SupersededSession: Sendable, Equatable {
    public var device: String
    /// The session that lost the lease.
    public var session: String
    /// The epoch of the lease that replaced it.
    public var byEpoch: Int64
}
