import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Session leases in PostgreSQL: a row per device whose epoch grows with each new session, and a
/// `guidance_session_lease` notification on every change that each instance listens for, to close
/// its own session of that device when a newer one took it (within the notification's delivery,
/// well under a second on one network).
///
/// - Important: ``Listener`` (in ``PostgresStore/services``) must run for ``superseded`` to hear
///   of other instances. When its connection drops it connects again and compares this instance's
///   leases with their rows, so a lease taken while it was away is still told; until then, the
///   old session is stopped by its fence at its next charge.
public final class PostgresLeases: SessionLeases {
    /// This instance (a process, or one ``PostgresStore`` of it) in the lease rows and in its
    /// connections' `application_name`, "guidance-server INSTANCE".
    public let instance: String
    static let channel = "guidance_session_lease"

    let client: PostgresClient
    let schema: PostgresSchema
    let target: String
    let logger: Logger

    private struct State {
        /// This instance's session of each device, with its epoch.
        var held: [String: Change] = [:]
        /// The newest lease heard of for each device, here or elsewhere: an acquire whose commit
        /// is overtaken by a newer one's notification learns from it that it lost at once.
        var newest: [String: Change] = [:]
    }

    private let state = Mutex(State())
    public let superseded: AsyncStream<SupersededSession>
    private let continuation: AsyncStream<SupersededSession>.Continuation

    init(client: PostgresClient, schema: PostgresSchema, instance: String, target: String, logger: Logger) {
        self.client = client
        self.instance = instance
        self.schema = schema
        self.target = target
        self.logger = logger
        (superseded, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    deinit { continuation.finish() }

    struct Change: Codable, Sendable {
        var device: String
        var session: String
        var epoch: Int64
    }

    public func acquire(device: String, session: String) async throws -> Int64 {
        let logger = self.logger, instance = self.instance
        let epoch = try await LedgerError.telling("session leases \(target): acquiring \(device)") {
            try await schema.ensure()
            return try await PostgresUnit.transaction(client, logger: logger) { connection -> Int64 in
                let rows = try await connection.query(
                    """
                    INSERT INTO session_leases (device, instance, session, epoch) VALUES (\(device), \(instance), \(session), 1)
                    ON CONFLICT (device) DO UPDATE SET instance = EXCLUDED.instance, session = EXCLUDED.session,
                        epoch = session_leases.epoch + 1, acquired_at = now()
                    RETURNING epoch
                    """, logger: logger)
                var epoch: Int64 = 0
                for try await value in rows.decode(Int64.self) { epoch = value }
                let payload = String(
                    decoding: try JSONEncoder().encode(Change(device: device, session: session, epoch: epoch)), as: UTF8.self)
                // Delivered to every listener when the transaction commits.
                try await connection.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: logger)
                return epoch
            }
        }
        let mine = Change(device: device, session: session, epoch: epoch)
        let lost: [SupersededSession] = state.withLock { state in
            var lost: [SupersededSession] = []
            if let previous = state.held[device], previous.session != session, previous.epoch < epoch {
                lost.append(SupersededSession(device: device, session: previous.session, byEpoch: epoch))
            }
            if let newer = state.newest[device], newer.epoch > epoch {
                // Taken again (elsewhere) before this acquire got here: lost already.
                state.held[device] = nil
                lost.append(SupersededSession(device: device, session: session, byEpoch: newer.epoch))
            } else {
                state.held[device] = mine
                state.newest[device] = mine
            }
            return lost
        }
        for session in lost { continuation.yield(session) }
        return epoch
    }

    public func release(device: String, session: String, epoch: Int64) async throws {
        state.withLock { state in
            if let held = state.held[device], held.session == session, held.epoch == epoch { state.held[device] = nil }
        }
        let logger = self.logger
        try await LedgerError.telling("session leases \(target): releasing \(device)") {
            try await schema.ensure()
            // The row stays, with no session: its epoch is the device's newest, and the next acquire
            // must go above it (every instance remembers it as the newest; starting again at 1 would
            // make the next sessions look older than a lease that has ended).
            try await client.query(
                """
                UPDATE session_leases SET session = '', instance = ''
                WHERE device = \(device) AND session = \(session) AND epoch = \(epoch)
                """, logger: logger)
        }
    }

    /// A notification: a lease changed somewhere.
    func changed(_ payload: String) {
        guard let change = try? JSONDecoder().decode(Change.self, from: Data(payload.utf8)) else {
            logger.warning("ignoring an unreadable lease notification")
            return
        }
        changed(change)
    }

    /// A lease changed somewhere: this instance's older session of that device is closed.
    func changed(_ change: Change) {
        let lost: String? = state.withLock { state in
            if change.epoch > state.newest[change.device]?.epoch ?? 0 { state.newest[change.device] = change }
            guard let held = state.held[change.device], held.session != change.session, held.epoch < change.epoch else { return nil }
            state.held[change.device] = nil
            return held.session
        }
        if let lost {
            continuation.yield(SupersededSession(device: change.device, session: lost, byEpoch: change.epoch))
        }
    }

    /// Compares this instance's leases with their rows, for changes whose notifications were lost
    /// with a listening connection. (A row gone altogether is left to the fence.)
    func reconcile() async throws {
        let devices = state.withLock { Array($0.held.keys) }
        guard !devices.isEmpty else { return }
        let rows = try await client.query(
            "SELECT device, session, epoch FROM session_leases WHERE device = ANY(\(devices))", logger: logger)
        for try await (device, session, epoch) in rows.decode((String, String, Int64).self) {
            changed(Change(device: device, session: session, epoch: epoch))
        }
    }

    /// Listens for lease changes as long as the server runs, connecting again (after 1 s) whenever
    /// its connection ends; each time it listens, it first catches up with ``reconcile()``.
    struct Listener: Service {
        let leases: PostgresLeases

        func run() async throws {
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    try await leases.client.withConnection { connection in
                        try await connection.listen(on: PostgresLeases.channel) { notifications in
                            try await leases.reconcile()
                            for try await notification in notifications.cancelOnGracefulShutdown() {
                                leases.changed(notification.payload)
                            }
                        }
                    }
                    if Task.isCancelled || Task.isShuttingDownGracefully { return }
                    leases.logger.warning("lease notifications \(leases.target) ended; listening again in 1 s")
                } catch {
                    if Task.isCancelled || Task.isShuttingDownGracefully { return }
                    leases.logger.warning("lease notifications \(leases.target): \(PostgresLedger.explain(error)); listening again in 1 s")
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
