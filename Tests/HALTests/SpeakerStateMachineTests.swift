@testable import HAL
import Testing

/// The speaker's rules alone (``Speaker/StateMachine``): which message plays, waits, is cut off
/// or replaced. No thread, sink or clock: every step is the test's.
@Suite struct SpeakerStateMachineTests {
    typealias Machine = Speaker.StateMachine<String>

    @Test func aNormalMessageWaitsForTheOnePlayingAndReplacesTheOneWaiting() {
        var machine = Machine()
        let r1 = machine.say("A", urgent: false)
        #expect(r1 == .init(id: 1))
        let r2 = machine.start()
        #expect(r2?.message == "A")
        let r3 = machine.say("B", urgent: false)
        #expect(r3 == .init(id: 2))
        let r4 = machine.say("C", urgent: false)
        #expect(r4 == .init(id: 3, replaced: 2), "B never starts")
        #expect(!machine.shouldCut, "a normal message lets A finish")
        let r5 = machine.finished(.spoken)
        #expect(!r5, "C still waits: not idle")
        let r6 = machine.start()
        #expect(r6?.message == "C")
        let r7 = machine.finished(.spoken)
        #expect(r7)
        #expect(machine.isIdle)
        #expect(machine.stats.spoken == 2 && machine.stats.replaced == 1 && machine.stats.cutOff == 0)
    }

    @Test func anUrgentMessageCutsOffTheOnePlayingOnceAndStartsNext() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        let r8 = machine.say("U1", urgent: true)
        #expect(r8 == .init(id: 2, cut: 1))
        #expect(machine.shouldCut)
        // A second urgent one before the thread saw the cut: it replaces U1, A is cut only once.
        let r9 = machine.say("U2", urgent: true)
        #expect(r9 == .init(id: 3, replaced: 2))
        let r10 = machine.finished(.cutOff)
        #expect(!r10)
        let r11 = machine.start()
        #expect(r11?.message == "U2")
        #expect(!machine.shouldCut, "the new message starts uncut")
        let r12 = machine.finished(.spoken)
        #expect(r12)
        #expect(
            machine.stats
                == {
                    var stats = Speaker.Stats(); stats.spoken = 1; stats.cutOff = 1; stats.replaced = 1; return stats
                }())
    }

    @Test func anUrgentMessageWithNothingPlayingCutsNothing() {
        var machine = Machine()
        let r13 = machine.say("U", urgent: true)
        #expect(r13 == .init(id: 1))
        #expect(!machine.shouldCut)
        let r14 = machine.start()
        #expect(r14?.urgent == true)
    }

    @Test func shuttingDownCutsTheOnePlayingDropsTheOneWaitingAndTakesNoMore() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        _ = machine.say("B", urgent: false)
        let r15 = machine.shutDown()
        #expect(r15)
        let r16 = machine.shutDown()
        #expect(!r16, "once only")
        #expect(machine.shouldCut && machine.pending == nil)
        let r17 = machine.say("C", urgent: true)
        #expect(r17 == .init(id: 0), "dropped")
        #expect(machine.hasWork, "the thread wakes to end")
        let r18 = machine.start()
        #expect(r18 == nil)
        #expect(machine.isIdle)
    }

    @Test func aKeptMessageIsNeverReplacedAndWaitsForTheGuidanceThatCameAfterIt() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        let status = machine.say("Incident saved.", urgent: false, keep: true)
        #expect(status == .init(id: 2))
        let guidance = machine.say("G1", urgent: false)
        #expect(guidance == .init(id: 3), "the status still waits: nothing replaced")
        let newer = machine.say("G2", urgent: false)
        #expect(newer == .init(id: 4, replaced: 3), "guidance replaces guidance only")
        #expect(machine.kept.map(\.message) == ["Incident saved."])
        let k1 = machine.finished(.spoken)
        #expect(!k1)
        let k2 = machine.start()
        #expect(k2?.message == "G2", "the road first")
        let k3 = machine.finished(.spoken)
        #expect(!k3, "the status still waits")
        let k4 = machine.start()
        #expect(k4?.message == "Incident saved.")
        let k5 = machine.finished(.spoken)
        #expect(k5)
        #expect(machine.isIdle)
        #expect(machine.stats.spoken == 3 && machine.stats.replaced == 1)
    }

    @Test func keptMessagesWaitInOrderAndPastTheLimitTheOldestIsDropped() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        let limit = Machine.keptLimit
        var said: [Machine.Said] = []
        for index in 1...(limit + 1) { said.append(machine.say("K\(index)", urgent: false, keep: true)) }
        #expect(said.dropLast().allSatisfy { $0.replaced == nil })
        #expect(said.last == .init(id: limit + 2, replaced: 2), "K1, the oldest, is dropped")
        _ = machine.finished(.spoken)
        var spoken: [String] = []
        while let entry = machine.start() {
            spoken.append(entry.message)
            if machine.finished(.spoken) { break }
        }
        #expect(spoken == (2...(limit + 1)).map { "K\($0)" })
        #expect(machine.isIdle)
        #expect(machine.stats.spoken == limit + 1 && machine.stats.replaced == 1)
    }

    @Test func aKeptMessageCutOffByAnUrgentOneIsSpokenAgainWholeOnce() {
        var machine = Machine()
        _ = machine.say("Incident saved.", urgent: false, keep: true)
        let k6 = machine.start()
        #expect(k6?.message == "Incident saved.")
        let urgent = machine.say("U1", urgent: true)
        #expect(urgent == .init(id: 2, cut: 1))
        let k7 = machine.finished(.cutOff)
        #expect(!k7, "cut off, it waits again")
        let k8 = machine.start()
        #expect(k8?.message == "U1")
        let k9 = machine.finished(.spoken)
        #expect(!k9)
        let again = machine.start()
        #expect(again?.message == "Incident saved." && again?.again == true)
        // Cut off a second time, it is not tried a third.
        _ = machine.say("U2", urgent: true)
        let k10 = machine.finished(.cutOff)
        #expect(!k10)
        let k11 = machine.start()
        #expect(k11?.message == "U2")
        let k12 = machine.finished(.spoken)
        #expect(k12)
        #expect(machine.isIdle)
        #expect(
            machine.stats
                == {
                    var stats = Speaker.Stats(); stats.spoken = 2; stats.cutOff = 1; return stats
                }())
    }

    @Test func shuttingDownDropsTheKeptMessagesToo() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        _ = machine.say("K", urgent: false, keep: true)
        #expect(machine.hasWork)
        let k13 = machine.shutDown()
        #expect(k13)
        #expect(machine.kept.isEmpty)
        let k14 = machine.start()
        #expect(k14 == nil)
        #expect(machine.isIdle)
    }

    @Test func failuresAndFallbackVoicesAreCounted() {
        var machine = Machine()
        _ = machine.say("A", urgent: false)
        _ = machine.start()
        machine.voiceFellBack()
        let r19 = machine.finished(.failed)
        #expect(r19)
        #expect(machine.stats.failures == 1 && machine.stats.voiceFallbacks == 1 && machine.stats.spoken == 0)
    }
}
