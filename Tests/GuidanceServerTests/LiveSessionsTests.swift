@testable import GuidanceServer
import Synchronization
import Testing

/// One timer for every session's checks: each tick runs every open session's check once, and a
/// session that ended is no longer asked.
@Suite struct LiveSessionsTests {
    @Test func everyOpenSessionIsCheckedOnceATickUntilItEnds() async {
        let sessions = LiveSessions()
        let counts = Mutex<[String: Int]>([:])
        for id in ["s1", "s2", "s3"] {
            await sessions.watch(id) { counts.withLock { $0[id, default: 0] += 1 } }
        }
        await sessions.checkAll()
        #expect(counts.withLock { $0 } == ["s1": 1, "s2": 1, "s3": 1])
        await sessions.remove("s2")
        await sessions.checkAll()
        await sessions.checkAll()
        #expect(counts.withLock { $0 } == ["s1": 3, "s2": 1, "s3": 3])
    }

    /// A supersede and the checks are the same session's: removing it ends both.
    @Test func removingASessionEndsItsSupersedeToo() async {
        let sessions = LiveSessions()
        let superseded = Mutex(0)
        await sessions.add("s1") { _ in superseded.withLock { $0 += 1 } }
        await sessions.watch("s1") {}
        await sessions.remove("s1")
        await sessions.supersede("s1")
        #expect(superseded.withLock { $0 } == 0)
        #expect(await sessions.count == 0)
    }

    /// A restart tells every open session, and a session that opens while the server goes down
    /// is told as it opens; one that ended is not told.
    @Test func aRestartTellsEveryOpenSessionAndEachThatOpensAfter() async {
        let sessions = LiveSessions()
        let told = Mutex<[String: [StreamSession.EndReason]]>([:])
        func add(_ id: String) async {
            await sessions.add(id) { reason in told.withLock { $0[id, default: []].append(reason) } }
        }
        await add("s1")
        await add("s2")
        await add("gone")
        await sessions.remove("gone")
        await sessions.supersede("s2")
        #expect(await sessions.restartAll() == 1)
        await add("late")
        #expect(told.withLock { $0 } == ["s1": [.restarting], "s2": [.superseded], "late": [.restarting]])
    }
}
