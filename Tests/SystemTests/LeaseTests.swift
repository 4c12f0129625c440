import Foundation
@testable import GuidanceServer
import Logging
import Testing
import TestSupport

/// Who owns a device's session: one instance in memory, two "instances" (two clients, two
/// listeners) on one real PostgreSQL database.
@Suite struct LeaseTests {
    static let logger = Logger(label: "lease-test")
    static let sha = sha256Hex(Data("x".utf8))

    @Test func localLeasesGrowTheEpochAndTellTheOlderSession() async throws {
        let leases = LocalLeases()
        var lost = leases.superseded.makeAsyncIterator()
        #expect(try await leases.acquire(device: "car-1", session: "a") == 1)
        #expect(try await leases.acquire(device: "car-2", session: "x") == 1)
        #expect(try await leases.acquire(device: "car-1", session: "b") == 2)
        #expect(await lost.next() == SupersededSession(device: "car-1", session: "a", byEpoch: 2))
        // A stale release leaves the newer lease; the holder's release frees it.
        try await leases.release(device: "car-1", session: "a", epoch: 1)
        #expect(try await leases.acquire(device: "car-1", session: "c") == 3)
        #expect(await lost.next() == SupersededSession(device: "car-1", session: "b", byEpoch: 3))
    }

    @Test func aSessionOnAnotherInstanceSupersedesAndFencesTheOlder() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let database = String(url.split(separator: "/").last ?? "")
        let a = try PostgresStore(url: url, logger: Self.logger), b = try PostgresStore(url: url, logger: Self.logger)
        try await withServices(a.services + b.services) {
            let epochA = try await a.leases.acquire(device: "car-1", session: "on-a")
            let lostOnA = Task { () -> SupersededSession? in
                for await lost in a.leases.superseded { return lost }
                return nil
            }
            let started = ContinuousClock.now
            let epochB = try await b.leases.acquire(device: "car-1", session: "on-b")
            #expect(epochB > epochA)
            // Told through PostgreSQL's notification; the wait is generous, the time printed.
            let giveUp = Task {
                try await Task.sleep(for: .seconds(10))
                lostOnA.cancel()
            }
            let lost = await lostOnA.value
            giveUp.cancel()
            print("instance A learned of B's session after \(ContinuousClock.now - started)")
            #expect(lost == SupersededSession(device: "car-1", session: "on-a", byEpoch: epochB))

            // A's stale epoch can no longer charge; B's can, once.
            let charge = UsageCharge(device: "car-1", stream: "s", seq: 1, sha256: Self.sha, seconds: 5)
            var stale = charge
            stale.fence = LeaseFence(device: "car-1", epoch: epochA)
            await #expect(throws: LedgerError.fenced(device: "car-1", epoch: epochA)) { try await a.ledger.charge(stale) }
            var current = charge
            current.fence = LeaseFence(device: "car-1", epoch: epochB)
            #expect(try await b.ledger.charge(current) == .charged(.init(device: "car-1", spentSeconds: 5, segments: 1)))

            // A stale release leaves B's lease in place.
            try await a.leases.release(device: "car-1", session: "on-a", epoch: epochA)
            let row = try await PostgresServer.shared().psql(
                database: database, "SELECT session || '|' || epoch FROM session_leases WHERE device = 'car-1'")
            #expect(row.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "on-b|\(epochB)")
            try await b.leases.release(device: "car-1", session: "on-b", epoch: epochB)
            // Released, the row keeps its epoch with no session, so the next lease goes above it.
            let released = try await PostgresServer.shared().psql(
                database: database, "SELECT session || '|' || epoch FROM session_leases WHERE device = 'car-1'")
            #expect(released.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "|\(epochB)")
            #expect(try await a.leases.acquire(device: "car-1", session: "on-a-again") == epochB + 1)
        }
    }
}
