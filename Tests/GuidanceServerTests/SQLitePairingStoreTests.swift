import Foundation
@testable import GuidanceServer
import Logging
import Testing

/// Pairing in the ledger's SQLite file, a step per transaction, with time passed in.
@Suite struct SQLitePairingStoreTests {
    let t0: Int64 = 1_780_000_000_000
    let settings = DeviceAuthorization.Settings()
    let rules = RefreshTokenRules(graceMs: 30_000)

    private func withStore(_ body: (SQLitePairingStore, String) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pairing-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("usage.sqlite").path
        // The usage ledger opens the file first, as the server does; the store shares the file.
        let ledger = try await SQLiteLedger.open(path: path, logger: Logger(label: "ledger"))
        let store = try await SQLitePairingStore.open(path: path, logger: Logger(label: "pairing"))
        do {
            try await body(store, path)
        } catch {
            try await store.shutdown()
            try await ledger.shutdown()
            throw error
        }
        try await store.shutdown()
        try await ledger.shutdown()
    }

    @Test func aCarIsPairedToTheOwnerWhoTypedItsCode() async throws {
        try await withStore { store, _ in
            let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0)
            let (code, _) = try await store.startAuthorization(
                deviceCodeHash: "dc1", deviceName: "car-7", nowMs: t0, settings: settings, newUserCode: { "123456789" })
            #expect(code == "123456789")
            #expect(
                try await store.poll(
                    deviceCodeHash: "dc1", nowMs: t0 + 5_000, settings: settings, newDevice: "d1",
                    refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 1_000_000) == .outcome(.authorizationPending))
            // Polling again at once is slow_down, and it sticks: the interval is stored.
            #expect(
                try await store.poll(
                    deviceCodeHash: "dc1", nowMs: t0 + 6_000, settings: settings, newDevice: "d1",
                    refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 1_000_000) == .outcome(.slowDown(interval: 10)))
            #expect(
                try await store.lookUp(userCode: code, owner: owner, address: "192.0.2.1", nowMs: t0 + 7_000)
                    == .pending(deviceName: "car-7", secondsLeft: 593))
            #expect(
                try await store.decide(
                    userCode: code, decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: t0 + 8_000) == .decided)
            let paired = try await store.poll(
                deviceCodeHash: "dc1", nowMs: t0 + 9_000, settings: settings, newDevice: "d1",
                refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 1_000_000)
            #expect(paired == .paired(PairedDevice(device: "d1", owner: owner, label: "car-7", pairedAtMs: t0 + 9_000)))
            #expect(try await store.pairedDevice("d1")?.owner == owner)
            #expect(try await store.owner(id: owner)?.displayName == "Ana")
            // The device code is spent; an unknown one was never there.
            #expect(
                try await store.poll(
                    deviceCodeHash: "dc1", nowMs: t0 + 20_000, settings: settings, newDevice: "d2",
                    refreshTokenHash: "r2", refreshExpiresAtMs: t0 + 1_000_000) == .outcome(.invalidGrant))
            #expect(
                try await store.poll(
                    deviceCodeHash: "nope", nowMs: t0 + 20_000, settings: settings, newDevice: "d2",
                    refreshTokenHash: "r2", refreshExpiresAtMs: t0 + 1_000_000) == .unknown)
        }
    }

    @Test func wrongCodesAreLimitedPerOwnerAndPerAddress() async throws {
        try await withStore { store, _ in
            let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0)
            let (code, _) = try await store.startAuthorization(
                deviceCodeHash: "dc1", deviceName: "car-7", nowMs: t0, settings: settings, newUserCode: { "111222333" })
            for attempt in 0..<5 {
                #expect(
                    try await store.lookUp(userCode: "00000000\(attempt)", owner: owner, address: "192.0.2.1", nowMs: t0 + Int64(attempt))
                        == .wrong)
            }
            // The sixth try is refused, the right code too, until the first wrong one is 15 minutes old.
            #expect(
                try await store.lookUp(userCode: code, owner: owner, address: "192.0.2.9", nowMs: t0 + 10) == .limited(waitSeconds: 900))
            // Another owner at that first address is not held back by Ana's account.
            let other = try await store.addOwner(email: "bo@example.org", displayName: "Bo", nowMs: t0)
            #expect(
                try await store.lookUp(userCode: code, owner: other, address: "192.0.2.1", nowMs: t0 + 10)
                    == .pending(deviceName: "car-7", secondsLeft: 600))
        }
    }

    @Test func aLiveCodeIsNeverHandedOutTwice() async throws {
        try await withStore { store, _ in
            let codes = ["555000111", "555000111", "555000222"]
            let next = Counter()
            for hash in ["a", "b"] {
                _ = try await store.startAuthorization(
                    deviceCodeHash: hash, deviceName: "car", nowMs: t0, settings: settings,
                    newUserCode: { codes[next.next()] })
            }
            #expect(next.value == 3)
            // Once the first expires its code is free again.
            let (again, _) = try await store.startAuthorization(
                deviceCodeHash: "c", deviceName: "car", nowMs: t0 + 600_000,
                settings: settings, newUserCode: { "555000111" })
            #expect(again == "555000111")
        }
    }

    /// A car paired to a new owner (`d1`, its first refresh token `r1`); the owner.
    private func pairedCar(_ store: SQLitePairingStore, code: String) async throws -> Int64 {
        let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0)
        _ = try await store.startAuthorization(
            deviceCodeHash: "dc1", deviceName: "car-7", nowMs: t0, settings: settings, newUserCode: { code })
        _ = try await store.lookUp(userCode: code, owner: owner, address: "192.0.2.1", nowMs: t0 + 1)
        _ = try await store.decide(userCode: code, decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: t0 + 1)
        _ = try await store.poll(
            deviceCodeHash: "dc1", nowMs: t0 + 2, settings: settings, newDevice: "d1",
            refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 10_000_000)
        return owner
    }

    @Test func refreshTokensRotateARetryIsForgivenAndReuseRevokesTheFamily() async throws {
        try await withStore { store, _ in
            let owner = try await pairedCar(store, code: "123123123")
            let later = t0 + 10_000_000
            let rotated = try await store.refresh(
                tokenHash: "r1", newTokenHash: "r2", nowMs: t0 + 100_000, expiresAtMs: later, rules: rules)
            guard case .rotated(let device) = rotated else { Issue.record("not rotated: \(rotated)"); return }
            #expect(device.device == "d1" && device.owner == owner)
            // The answer was lost on the way: r1 again within 30 s is a retry, handed the same r2
            // (the endpoint derives it from r1), and r2 stays good.
            #expect(
                try await store.refresh(tokenHash: "r1", newTokenHash: "r2", nowMs: t0 + 110_000, expiresAtMs: later, rules: rules)
                    == .rotated(device))
            #expect(
                try await store.refresh(tokenHash: "r2", newTokenHash: "r4", nowMs: t0 + 120_000, expiresAtMs: later, rules: rules)
                    == .rotated(device))
            // r1 long after: reuse. The family is gone, r4 with it.
            #expect(
                try await store.refresh(tokenHash: "r1", newTokenHash: "x", nowMs: t0 + 200_000, expiresAtMs: later, rules: rules)
                    == .reused(device: "d1"))
            #expect(
                try await store.refresh(tokenHash: "r4", newTokenHash: "r5", nowMs: t0 + 201_000, expiresAtMs: later, rules: rules)
                    == .refused)
        }
    }

    /// A retry whose successor is not the one handed out the first time is not a retry the car
    /// could make: it is treated as reuse, and the family revoked.
    @Test func aRetryWithAnotherSuccessorRevokesTheFamily() async throws {
        try await withStore { store, _ in
            _ = try await pairedCar(store, code: "123123124")
            let later = t0 + 10_000_000
            guard
                case .rotated = try await store.refresh(
                    tokenHash: "r1", newTokenHash: "r2", nowMs: t0 + 100_000, expiresAtMs: later, rules: rules)
            else { Issue.record("not rotated"); return }
            #expect(
                try await store.refresh(tokenHash: "r1", newTokenHash: "other", nowMs: t0 + 101_000, expiresAtMs: later, rules: rules)
                    == .reused(device: "d1"))
            #expect(
                try await store.refresh(tokenHash: "r2", newTokenHash: "r3", nowMs: t0 + 102_000, expiresAtMs: later, rules: rules)
                    == .refused)
        }
    }

    @Test func concurrentPollsOfOneApprovedCodePairOnce() async throws {
        try await withStore { store, _ in
            let owner = try await store.addOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0)
            let (code, _) = try await store.startAuthorization(
                deviceCodeHash: "dc1", deviceName: "car-7", nowMs: t0, settings: settings, newUserCode: { "999888777" })
            _ = try await store.lookUp(userCode: code, owner: owner, address: "192.0.2.1", nowMs: t0 + 1)
            _ = try await store.decide(userCode: code, decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: t0 + 1)
            let results = try await withThrowingTaskGroup(of: PairingPoll.self) { group in
                for i in 0..<8 {
                    group.addTask {
                        try await store.poll(
                            deviceCodeHash: "dc1", nowMs: t0 + 10_000, settings: settings, newDevice: "d\(i)",
                            refreshTokenHash: "r\(i)", refreshExpiresAtMs: t0 + 1_000_000)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { if case .paired = $0 { true } else { false } }.count == 1)
            #expect(results.filter { $0 == .outcome(.invalidGrant) }.count == 7)
        }
    }
}

private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func next() -> Int {
        lock.withLock {
            defer { count += 1 }; return count
        }
    }
}
