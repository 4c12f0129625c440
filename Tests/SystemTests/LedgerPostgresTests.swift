import Foundation
@testable import GuidanceServer
import Logging
import Testing
import TestSupport

/// The PostgreSQL ledger and leases when something goes wrong: what each failure is told as, and
/// how an instance hears of a lost lease again after its listening connection was killed.
@Suite struct LedgerPostgresTests {
    static let logger = Logger(label: "ledger-postgres-test")
    static let sha = sha256Hex(Data("x".utf8))

    static func database(_ url: String) -> String { String(url.split(separator: "/").last ?? "") }

    static func psql(_ url: String, _ query: String) async throws -> String {
        let result = try await PostgresServer.shared().psql(database: database(url), query)
        guard result.status == 0 else { throw PostgresServer.Failure(description: "psql \(query): \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A charge whose fence is stale is refused as ``LedgerError/fenced`` (what the session closes
    /// with 4000 for), not as a failed transaction (what it closes with 1011 for); nothing changes.
    @Test func aStaleFenceIsToldAsFenced() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(store.services) {
            let first = try await store.leases.acquire(device: "car-1", session: "one")
            let second = try await store.leases.acquire(device: "car-1", session: "two")
            var charge = UsageCharge(device: "car-1", stream: "s", seq: 0, sha256: Self.sha, seconds: 5)
            charge.fence = LeaseFence(device: "car-1", epoch: first)
            await #expect(throws: LedgerError.fenced(device: "car-1", epoch: first)) { try await store.ledger.charge(charge) }
            // A device nobody leases: no epoch is its epoch.
            var unleased = UsageCharge(device: "car-2", stream: "s", seq: 0, sha256: Self.sha, seconds: 5)
            unleased.fence = LeaseFence(device: "car-2", epoch: 1)
            await #expect(throws: LedgerError.fenced(device: "car-2", epoch: 1)) { try await store.ledger.charge(unleased) }
            #expect(try await Self.psql(url, "SELECT count(*) FROM usage_events") == "0")
            charge.fence = LeaseFence(device: "car-1", epoch: second)
            #expect(try await store.ledger.charge(charge) == .charged(.init(device: "car-1", spentSeconds: 5, segments: 1)))
        }
    }

    /// A database error is ``LedgerError/unavailable`` with PostgreSQL's own words (its error's
    /// description alone is a generic sentence), for the server's log.
    @Test func aDatabaseErrorIsToldInPostgresWords() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(store.services) {
            _ = try await store.ledger.credit(device: "car-1", seconds: 5, note: "")
            _ = try await Self.psql(url, "DROP TABLE balances")
            let error = await #expect(throws: LedgerError.self) {
                try await store.ledger.charge(UsageCharge(device: "car-1", stream: "s", seq: 0, sha256: Self.sha, seconds: 5))
            }
            #expect(error.map { "\($0)" }?.contains(#"relation "balances" does not exist"#) == true, "\(String(describing: error))")
            #expect(try await Self.psql(url, "SELECT count(*) FROM usage_events") == "0", "the event was rolled back with its balance")
        }
    }

    /// Two instances starting at once on an empty database both make the schema (one waits for
    /// the other's) and share one lease row.
    @Test func twoInstancesStartingTogetherShareOneSchema() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let a = try PostgresStore(url: url, logger: Self.logger), b = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(a.services + b.services) {
            async let first = a.leases.acquire(device: "car-1", session: "on-a")
            async let second = b.leases.acquire(device: "car-1", session: "on-b")
            let epochs = try await [first, second]
            #expect(Set(epochs) == [1, 2])
        }
        #expect(try await Self.psql(url, "SELECT count(*) FROM session_leases") == "1")
    }

    /// An instance's listening connection killed by the database: the listener connects again, and a lease
    /// taken meanwhile (its notification lost with the connection) is still told to the instance
    /// that held it.
    @Test func aLeaseTakenWhileTheListenerWasCutIsStillTold() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let a = try PostgresStore(url: url, logger: Self.logger), b = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(a.services + b.services) {
            let held = try await a.leases.acquire(device: "car-1", session: "on-a")
            let lostOnA = Task { () -> SupersededSession? in
                for await lost in a.leases.superseded { return lost }
                return nil
            }
            // A's listening connection, by the name A's connections give.
            try await Self.waitForListeners(url, count: 2)
            let cut = try await Self.psql(
                url,
                """
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND query LIKE 'LISTEN%' AND application_name = 'guidance-server \(a.leases.instance)'
                """)
            #expect(cut == "1", "A's listening connection cut")
            let started = ContinuousClock.now
            let taken = try await b.leases.acquire(device: "car-1", session: "on-b")
            #expect(taken > held)
            let giveUp = Task {
                try await Task.sleep(for: .seconds(15))
                lostOnA.cancel()
            }
            let lost = await lostOnA.value
            giveUp.cancel()
            print("instance A learned of B's session \(ContinuousClock.now - started) after its listener was cut")
            #expect(lost == SupersededSession(device: "car-1", session: "on-a", byEpoch: taken))
        }
    }

    /// An acquire whose commit is overtaken by a newer lease's notification (another instance
    /// took the device between this one's commit and its return) is told lost at once, rather
    /// than held until its first charge is fenced.
    @Test func anAcquireOvertakenByANewerLeaseIsToldLostAtOnce() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(store.services) {
            // What the listener hands on when another instance's acquire of epoch 7 commits.
            store.leases.changed(#"{"device":"car-1","session":"elsewhere","epoch":7}"#)
            let epoch = try await store.leases.acquire(device: "car-1", session: "here")
            #expect(epoch == 1)
            #expect(await Self.next(store.leases.superseded) == SupersededSession(device: "car-1", session: "here", byEpoch: 7))
            // A later acquire here, with the newest epoch, holds the device again.
            _ = try await Self.psql(url, "UPDATE session_leases SET epoch = 7 WHERE device = 'car-1'")
            #expect(try await store.leases.acquire(device: "car-1", session: "again") == 8)
            store.leases.changed(#"{"device":"car-1","session":"elsewhere","epoch":9}"#)
            #expect(await Self.next(store.leases.superseded) == SupersededSession(device: "car-1", session: "again", byEpoch: 9))
        }
    }

    /// The next session told lost, or nil when none is within a generous 10 s.
    static func next(_ lost: AsyncStream<SupersededSession>) async -> SupersededSession? {
        await withTaskGroup(of: SupersededSession?.self) { group in
            group.addTask {
                for await session in lost { return session }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Waits (10 s at most) until `count` connections of the database listen.
    static func waitForListeners(_ url: String, count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let listening = try await psql(
                url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'")
            if listening == "\(count)" { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("\(count) listeners never connected")
    }
}
