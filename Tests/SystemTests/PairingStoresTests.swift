import Foundation
import GuidanceProtocol
import Hummingbird
@testable import GuidanceServer
import Logging
import NIOPosix
import PostgresNIO
import ServiceLifecycle
import Testing
import TestSupport

/// Pairing, owners and purchases on both ledgers a server can have: SQLite (one file, two
/// connections) and PostgreSQL (Debian's, started by the tests; two clients, as two instances).
@Suite struct PairingStoresTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, postgres }
    typealias Store = any PairingStore & OwnerStore
    static let logger = Logger(label: "pairing-stores-test")
    let t0: Int64 = 1_780_000_000_000

    /// Two stores on one database (two instances), and the database's credited seconds of a device.
    func withTwo(_ kind: Kind, _ body: @Sendable (Store, Store, @Sendable (String) async throws -> Int) async throws -> Void) async throws {
        switch kind {
        case .sqlite:
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stores-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let path = folder.appendingPathComponent("usage.sqlite").path
            let ledger = try await SQLiteLedger.open(path: path, logger: Self.logger)
            let one = try await SQLitePairingStore.open(path: path, logger: Self.logger)
            let two = try await SQLitePairingStore.open(path: path, logger: Self.logger)
            var failure: (any Error)?
            do { try await body(one, two) { try await ledger.balance(device: $0).creditedSeconds } } catch { failure = error }
            try await one.shutdown()
            try await two.shutdown()
            try await ledger.shutdown()
            if let failure { throw failure }
        case .postgres:
            let url = try await PostgresServer.shared().createDatabase()
            let first = try PostgresStore(url: url, logger: Self.logger)
            let second = try PostgresStore(url: url, logger: Self.logger)
            try await withServices(first.ledgerServices + second.ledgerServices) {
                try await body(PostgresPairingStore(ledger: first.ledger), PostgresPairingStore(ledger: second.ledger)) {
                    try await first.ledger.balance(device: $0).creditedSeconds
                }
            }
        }
    }

    @Test(arguments: Kind.allCases)
    func aCarPairsAndItsRefreshTokensRotateOnce(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            let settings = DeviceAuthorization.Settings()
            let owner = try #require(try await one.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            let (code, _) = try await one.startAuthorization(
                deviceCodeHash: "dc", deviceName: "van", nowMs: t0, settings: settings,
                newUserCode: { "123456789" })
            #expect(
                try await two.poll(
                    deviceCodeHash: "dc", nowMs: t0 + 5_000, settings: settings, newDevice: "car-a",
                    refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 10_000_000) == .outcome(.authorizationPending))
            #expect(
                try await one.poll(
                    deviceCodeHash: "dc", nowMs: t0 + 6_000, settings: settings, newDevice: "car-a",
                    refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 10_000_000) == .outcome(.slowDown(interval: 10)))
            #expect(
                try await two.lookUp(userCode: code, owner: owner, address: "192.0.2.1", nowMs: t0 + 7_000)
                    == .pending(deviceName: "van", secondsLeft: 593))
            #expect(
                try await two.decide(
                    userCode: code, decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: t0 + 8_000) == .decided)
            // Both instances polled at once: the car is paired once.
            async let a = one.poll(
                deviceCodeHash: "dc", nowMs: t0 + 20_000, settings: settings, newDevice: "car-a",
                refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 10_000_000)
            async let b = two.poll(
                deviceCodeHash: "dc", nowMs: t0 + 20_000, settings: settings, newDevice: "car-b",
                refreshTokenHash: "r1b", refreshExpiresAtMs: t0 + 10_000_000)
            let results = try await [a, b]
            #expect(results.filter { if case .paired = $0 { true } else { false } }.count == 1, "\(results)")
            let device = results.compactMap { if case .paired(let d) = $0 { d.device } else { nil } }.first ?? ""
            let first = results.first { if case .paired = $0 { true } else { false } } == results[0] ? "r1" : "r1b"
            // Rotation, a retry within the grace, reuse that revokes the family.
            let rules = RefreshTokenRules(graceMs: 30_000)
            guard
                case .rotated = try await one.refresh(
                    tokenHash: first, newTokenHash: "n1", nowMs: t0 + 100_000, expiresAtMs: t0 + 10_000_000, rules: rules)
            else { Issue.record("not rotated"); return }
            // A retry within the grace is handed the same successor (derived from the token), and
            // the successor stays good: a copy presenting the spent token cannot lock the car out.
            guard
                case .rotated = try await two.refresh(
                    tokenHash: first, newTokenHash: "n1", nowMs: t0 + 110_000, expiresAtMs: t0 + 10_000_000, rules: rules)
            else { Issue.record("a retry refused"); return }
            guard
                case .rotated = try await one.refresh(
                    tokenHash: "n1", newTokenHash: "n3", nowMs: t0 + 120_000, expiresAtMs: t0 + 10_000_000, rules: rules)
            else { Issue.record("n1 not rotated after a retry"); return }
            #expect(
                try await two.refresh(tokenHash: first, newTokenHash: "x", nowMs: t0 + 200_000, expiresAtMs: t0 + 10_000_000, rules: rules)
                    == .reused(device: device))
            #expect(
                try await one.refresh(tokenHash: "n3", newTokenHash: "x", nowMs: t0 + 201_000, expiresAtMs: t0 + 10_000_000, rules: rules)
                    == .refused)
        }
    }

    /// An owner's settings, impact mails among them, written at one instance and read at the other.
    @Test(arguments: Kind.allCases)
    func anOwnersSettingsAreKeptForEveryInstance(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            let owner = try #require(try await one.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            #expect(try await two.preferences(owner: owner) == OwnerPreferences(), "nothing chosen, no mail")
            try await one.setPreferences(owner: owner, OwnerPreferences(timeZone: "Asia/Seoul", language: "ko", impactMail: true))
            #expect(try await two.preferences(owner: owner) == OwnerPreferences(timeZone: "Asia/Seoul", language: "ko", impactMail: true))
            try await two.setPreferences(owner: owner, OwnerPreferences(timeZone: nil, language: nil, impactMail: false))
            #expect(try await one.preferences(owner: owner) == OwnerPreferences())
        }
    }

    @Test(arguments: Kind.allCases)
    func aWebhookAtTwoInstancesCreditsOnce(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, credited in
            let owner = try #require(try await one.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            try await one.startPayment(
                Payment(
                    provider: "simulated", id: "pay_1", owner: owner, device: "car-a", product: "1 hour",
                    seconds: 3600, price: "4.99 EUR", createdAtMs: t0))
            let results = try await withThrowingTaskGroup(of: Bool.self) { group in
                for store in [one, two, one, two] {
                    group.addTask { try await store.settlePayment(provider: "simulated", id: "pay_1", paid: true, nowMs: t0 + 1) }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(results.filter { $0 }.count == 1, "\(results)")
            #expect(try await credited("car-a") == 3600)
            #expect(try await two.payment(provider: "simulated", id: "pay_1")?.status == .paid)
        }
    }

    @Test(arguments: Kind.allCases)
    func ownersTheirLinksAndTheirCars(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { store, other, _ in
            let ana = try #require(try await store.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            #expect(try await other.createOwner(email: "ana@example.org", displayName: "Again", nowMs: t0) == nil)
            let bo = try #require(try await other.createOwner(email: "bo@example.org", displayName: "Bo", nowMs: t0))
            try await store.addPasswordLink(owner: ana, tokenHash: "h1", expiresAtMs: t0 + 1000)
            #expect(try await other.usePasswordLink(tokenHash: "h1", passwordHash: "$2b$x", nowMs: t0 + 1) == ana)
            #expect(try await store.usePasswordLink(tokenHash: "h1", passwordHash: "$2b$y", nowMs: t0 + 2) == nil)
            #expect(try await other.account(email: "ana@example.org")?.passwordHash == "$2b$x")
            let (code, _) = try await store.startAuthorization(
                deviceCodeHash: "dc", deviceName: "van", nowMs: t0, settings: .init(),
                newUserCode: { "111222333" })
            _ = try await store.lookUp(userCode: code, owner: ana, address: "192.0.2.1", nowMs: t0)
            _ = try await store.decide(userCode: code, decision: .approve(owner: ana), owner: ana, address: "192.0.2.1", nowMs: t0)
            _ = try await store.poll(
                deviceCodeHash: "dc", nowMs: t0 + 1, settings: .init(), newDevice: "car-a",
                refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 1_000_000)
            #expect(try await other.rename(device: "car-a", owner: bo, label: "mine") == false)
            #expect(try await other.rename(device: "car-a", owner: ana, label: "Family car") == true)
            for i in 0..<7 { try await store.recordGuidance(device: "car-a", text: "hint \(i)", nowMs: t0 + Int64(i)) }
            try await store.seen(device: "car-a", nowMs: t0 + 50)
            try await store.recordTrack(device: "car-a", points: [TrackPoint(atMs: t0, lat: 37.5, lon: 127, speed: 3)])
            let cars = try await other.devices(owner: ana)
            #expect(cars.map(\.label) == ["Family car"] && cars.first?.lastSeenAtMs == t0 + 50)
            #expect(cars.first?.recentGuidance.map(\.text) == ["hint 6", "hint 5", "hint 4", "hint 3", "hint 2"])
            #expect(try await store.unpair(device: "car-a", owner: bo, nowMs: t0 + 60) == false)
            #expect(try await store.unpair(device: "car-a", owner: ana, nowMs: t0 + 60) == true)
            #expect(try await other.devices(owner: ana).isEmpty)
            #expect(try await other.pairedDevice("car-a") == nil)
            // Its drives were Ana's: the car's next owner starts with none.
            #expect(try await other.trips(device: "car-a", limit: 10).isEmpty)
            #expect(try await other.track(device: "car-a", fromMs: 0, toMs: .max).isEmpty)
            #expect(
                try await other.refresh(tokenHash: "r1", newTokenHash: "r2", nowMs: t0 + 61, expiresAtMs: t0 + 1_000_000, rules: .init())
                    == .refused)
        }
    }

    /// A car's drive, written by two instances one after the other (a handover): one trip that
    /// grows, a new one after a pause, a segment sent again adds nothing, and the sweep forgets
    /// what ended before its cutoff.
    @Test(arguments: Kind.allCases)
    func tripsGrowAcrossInstancesAndExpire(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            func points(from start: Int64, count: Int, lat: Double) -> [TrackPoint] {
                (0..<count).map {
                    TrackPoint(atMs: start + Int64($0) * 2_000, lat: lat + Double($0) * 0.0002, lon: 127.0, speed: 10 + Double($0))
                }
            }
            try await one.recordTrack(device: "car-a", points: points(from: t0, count: 3, lat: 37.5))
            try await two.recordTrack(device: "car-a", points: points(from: t0 + 6_000, count: 3, lat: 37.5006))
            try await one.recordTrack(device: "car-a", points: points(from: t0 + 6_000, count: 3, lat: 37.5006))
            let later = t0 + TripRules.pauseMs + 20_000
            try await two.recordTrack(device: "car-a", points: points(from: later, count: 2, lat: 37.6))
            let trips = try await one.trips(device: "car-a", limit: 10)
            #expect(trips.map(\.startMs) == [later, t0])
            let first = try #require(trips.last)
            #expect(first.endMs == t0 + 10_000 && first.topSpeed == 12)
            // Six steps of 0.0002 degrees of latitude: about 22.2 m each.
            #expect(abs(first.distanceMeters - 5 * 22.24) < 1, "\(first.distanceMeters)")
            #expect(try await two.track(device: "car-a", fromMs: first.startMs, toMs: first.endMs).count == 6)
            #expect(try await two.trip(device: "car-a", startMs: t0) == first)
            #expect(try await two.trips(device: "car-b", limit: 10).isEmpty)
            try await one.expireTrips(beforeMs: later)
            #expect(try await two.trips(device: "car-a", limit: 10).map(\.startMs) == [later])
            #expect(try await two.track(device: "car-a", fromMs: 0, toMs: later - 1).isEmpty)
        }
    }

    /// The clips of all one owner's cars share `clips.maxMegabytesPerOwner`: a clip past it is
    /// refused (the car keeps it), a clip announced again is not counted twice, and deleting an
    /// older one makes room. Another owner's clips do not count.
    @Test func anOwnersCarsShareTheirClipQuota() async throws {
        let t0 = self.t0
        try await withTwo(.sqlite) { store, _, _ in
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("quota-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: folder) }
            let clips = FileClipStore(root: folder.path)
            let ana = try #require(try await store.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            let bo = try #require(try await store.createOwner(email: "bo@example.org", displayName: "Bo", nowMs: t0))
            for (index, (owner, car)) in [(ana, "car-a"), (ana, "car-b"), (bo, "car-c")].enumerated() {
                let code = "11122233\(index)"
                _ = try await store.startAuthorization(
                    deviceCodeHash: "dc\(index)", deviceName: car, nowMs: t0, settings: .init(),
                    newUserCode: { code })
                _ = try await store.lookUp(userCode: code, owner: owner, address: "192.0.2.1", nowMs: t0)
                _ = try await store.decide(userCode: code, decision: .approve(owner: owner), owner: owner, address: "192.0.2.1", nowMs: t0)
                _ = try await store.poll(
                    deviceCodeHash: "dc\(index)", nowMs: t0 + 1, settings: .init(), newDevice: car,
                    refreshTokenHash: "r\(index)", refreshExpiresAtMs: t0 + 1_000_000)
            }
            func clip(_ id: String, bytes: Int) -> ClientMessage.Clip {
                .init(
                    id: id, kind: "parking", at: "2026-11-29T08:02:30Z", from: "2026-11-29T08:02:20Z", to: "2026-11-29T08:02:40Z",
                    files: [.init(name: "a.mp4", bytes: bytes, sha256: String(repeating: "0", count: 64))])
            }
            let limit = 1000
            // As a session does it: the owner looked up, then counted and kept in one step.
            func announce(_ clip: ClientMessage.Clip, _ car: String, in clips: FileClipStore = clips) async throws -> ClipAppend {
                let admission = try await ClipQuota.admission(device: car, owners: store, limitBytes: limit)
                return try await NIOThreadPool.singleton.runIfActive {
                    try ClipQuota.announce(clip, device: car, admission: admission, store: clips, now: Date())
                }
            }
            func refused(_ answer: ClipAppend) -> String? { if case .refused(let why) = answer { why } else { nil } }
            #expect(refused(try await announce(clip("one", bytes: 600), "car-a")) == nil)
            #expect(refused(try await announce(clip("bos", bytes: 900), "car-c")) == nil)
            #expect(refused(try await announce(clip("one", bytes: 600), "car-a")) == nil, "announced again, counted once")
            let why = try #require(refused(try await announce(clip("two", bytes: 401), "car-b")))
            #expect(why.contains("clips.maxMegabytesPerOwner") && why.contains("600"), "\(why)")
            #expect(refused(try await announce(clip("three", bytes: 100), "car-c")) == nil, "Bo's 900 are Bo's")
            _ = try clips.delete(device: "car-a", id: "one")
            // Two cars of Ana's at once, at two instances (two stores on one folder): only one fits.
            let other = FileClipStore(root: folder.path)
            async let first = announce(clip("race-a", bytes: 700), "car-a")
            async let second = announce(clip("race-b", bytes: 700), "car-b", in: other)
            let answers = try await [first, second]
            #expect(answers.filter { refused($0) == nil }.count == 1, "\(answers)")
            #expect(
                refused(try await announce(clip("x", bytes: 10), "car-unpaired"))?.contains("not paired") == true,
                "a car without an owner takes no room")
        }
    }

    /// Only the owner who looked a code up decides it; anyone else deciding it is a wrong guess
    /// against the owner, the address and the code, which is locked after three.
    @Test(arguments: Kind.allCases)
    func aCodeIsDecidedOnlyByWhoLookedItUpAndLockedAfterGuessesAgainstIt(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            let ana = try #require(try await one.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            let eve = try #require(try await one.createOwner(email: "eve@example.org", displayName: "Eve", nowMs: t0))
            let (code, _) = try await one.startAuthorization(
                deviceCodeHash: "dc", deviceName: "van", nowMs: t0, settings: .init(),
                newUserCode: { "444555666" })
            _ = try await one.lookUp(userCode: code, owner: ana, address: "192.0.2.1", nowMs: t0 + 1)
            var guesses: [CodeDecision] = []
            for i in 0..<3 {
                guesses.append(
                    try await two.decide(
                        userCode: code, decision: .approve(owner: eve), owner: eve, address: "198.51.100.1",
                        nowMs: t0 + 2 + Int64(i)))
            }
            #expect(guesses == [.wrong, .wrong, .locked])
            // Locked: the car is refused, and the owner who looked it up cannot approve it either.
            #expect(
                try await one.decide(userCode: code, decision: .approve(owner: ana), owner: ana, address: "192.0.2.1", nowMs: t0 + 10)
                    == .gone)
            #expect(
                try await two.poll(
                    deviceCodeHash: "dc", nowMs: t0 + 10_000, settings: .init(), newDevice: "car-a",
                    refreshTokenHash: "r1", refreshExpiresAtMs: t0 + 1_000_000) == .outcome(.accessDenied))
            // Eve's three guesses count against her account at both routes: two more and she is held.
            for i in 0..<2 {
                #expect(try await one.lookUp(userCode: "00000000\(i)", owner: eve, address: "198.51.100.2", nowMs: t0 + 20) == .wrong)
            }
            guard
                case .limited = try await two.decide(
                    userCode: "000000009", decision: .deny, owner: eve, address: "198.51.100.3", nowMs: t0 + 30)
            else { Issue.record("not limited at /pair/decide"); return }
        }
    }

    /// Tries counted before they are checked: at most the limit get through, however many arrive
    /// at once at two instances; a success takes its try back.
    @Test(arguments: Kind.allCases)
    func triesAreCountedOnceEachAndAtMostTheLimitGetThrough(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            let throttle = [Throttle("signin-account:x", CodeEntryLimiter(maxFailures: 3, windowMs: 60_000))]
            let results = try await withThrowingTaskGroup(of: Int?.self) { group in
                for i in 0..<8 { group.addTask { try await (i % 2 == 0 ? one : two).attempt(throttle, nowMs: t0) } }
                return try await group.reduce(into: [Int?]()) { $0.append($1) }
            }
            #expect(results.filter { $0 == nil }.count == 3, "\(results)")
            let through = try await one.attempt([Throttle("k", CodeEntryLimiter(maxFailures: 1, windowMs: 60_000))], nowMs: t0)
            #expect(through == nil)
            try await two.forgive(["k"], atMs: t0)
            #expect(try await one.attempt([Throttle("k", CodeEntryLimiter(maxFailures: 1, windowMs: 60_000))], nowMs: t0 + 1) == nil)
            #expect(try await one.attempt([Throttle("k", CodeEntryLimiter(maxFailures: 1, windowMs: 60_000))], nowMs: t0 + 2) == 60)
        }
    }

    /// Tries from different owners share their address's key, so counting a try on PostgreSQL
    /// holds every key of its throttles until its transaction ends, not only the first (the
    /// owner's): while one instance counts, another cannot take the address's key, nor the owner's,
    /// and can take a key the try does not name.
    @Test func countingATryHoldsEveryKeyOnPostgreSQL() async throws {
        try await withTwo(.postgres) { one, two, _ in
            let counting = try #require(one as? PostgresPairingStore)
            let other = try #require(two as? PostgresPairingStore)
            let keys = ["pair-owner:1", "pair-address:198.51.100.9"]
            let taken = try await counting.transaction { db in
                try await PostgresPairingStatements(db: db, logger: counting.logger).holdCodeEntries(keys: keys)
                var taken: [String: Bool] = [:]
                for key in keys + ["pair-owner:2"] {
                    taken[key] = try await other.transaction { db in
                        var free = false
                        for try await got in try await db.query(
                            "SELECT pg_try_advisory_xact_lock(hashtext(\(key)))", logger: other.logger
                        ).decode(Bool.self) { free = got }
                        return !free
                    }
                }
                return taken
            }
            #expect(taken == ["pair-owner:1": true, "pair-address:198.51.100.9": true, "pair-owner:2": false], "\(taken)")
        }
    }

    /// A new password ends every web session of its owner (and no one else's) and spends every
    /// other link; session keys are stored hashed.
    @Test(arguments: Kind.allCases)
    func aNewPasswordEndsTheOwnersSessionsAndOtherLinks(kind: Kind) async throws {
        let t0 = self.t0
        try await withTwo(kind) { one, two, _ in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let ana = try #require(try await one.createOwner(email: "ana@example.org", displayName: "Ana", nowMs: t0))
            let bo = try #require(try await one.createOwner(email: "bo@example.org", displayName: "Bo", nowMs: t0))
            let driver: any PersistDriver =
                if let sqlite = one as? SQLitePairingStore { SQLiteSessionDriver(store: sqlite) } else {
                    PostgresSessionDriver(store: try #require(one as? PostgresPairingStore))
                }
            try await driver.set(key: "hbs.ana-laptop", value: WebSession(owner: ana, csrf: "c1"), expires: .seconds(3600))
            try await driver.set(key: "hbs.ana-phone", value: WebSession(owner: ana, csrf: "c2"), expires: .seconds(3600))
            try await driver.set(key: "hbs.bo", value: WebSession(owner: bo, csrf: "c3"), expires: .seconds(3600))
            let listed = try await two.webSessions(owner: ana, nowMs: now)
            #expect(listed.count == 2)
            #expect(listed.allSatisfy { !$0.id.contains("ana-") }, "stored as they are: \(listed.map(\.id))")
            #expect(try await two.endWebSession(owner: bo, id: listed[0].id) == false, "another owner's session")
            #expect(try await two.endWebSession(owner: ana, id: listed[0].id) == true)
            #expect(try await two.webSessions(owner: ana, nowMs: now).count == 1)
            try await one.addPasswordLink(owner: ana, tokenHash: "h1", expiresAtMs: now + 60_000)
            try await one.addPasswordLink(owner: ana, tokenHash: "h2", expiresAtMs: now + 60_000)
            #expect(try await two.passwordLinkOwner(tokenHash: "h1", nowMs: now) == ana)
            #expect(try await two.usePasswordLink(tokenHash: "h2", passwordHash: "$2b$new", nowMs: now) == ana)
            #expect(try await two.passwordLinkOwner(tokenHash: "h1", nowMs: now) == nil)
            #expect(try await one.usePasswordLink(tokenHash: "h1", passwordHash: "$2b$old", nowMs: now) == nil)
            #expect(try await driver.get(key: "hbs.ana-laptop", as: WebSession.self) == nil)
            #expect(try await driver.get(key: "hbs.ana-phone", as: WebSession.self) == nil)
            #expect(try await driver.get(key: "hbs.bo", as: WebSession.self)?.owner == bo)
        }
    }
}
