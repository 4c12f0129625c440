@testable import HAL
import Testing

/// The haptics player's timing rules alone (``Haptics/StateMachine``), with the time passed in:
/// the durations that the threaded tests may only bound from below are exact here.
@Suite struct HapticsStateMachineTests {
    typealias Machine = Haptics.StateMachine
    static let ms: UInt64 = 1_000_000
    let t0: UInt64 = 5_000 * 1_000_000

    /// Plays `pattern` from `t0`, setting each edge `late` after it is due; the (level, time) of
    /// every edge, the first included.
    func edges(_ pattern: HapticPattern, late: UInt64 = 0) -> [(active: Bool, at: UInt64)] {
        var machine = Machine()
        _ = machine.started(pattern, at: t0)
        var edges = [(true, t0)]
        while let due = machine.due, let level = machine.nextLevel {
            let at = due + late
            edges.append((level, at))
            if machine.edgeSet(at: at) { break }
        }
        #expect(machine.due == nil && !machine.lineActive, "over, with the line inactive")
        return edges
    }

    @Test func clearIsOnePulseOfExactly150Milliseconds() {
        let clear = edges(.clear)
        #expect(clear.map(\.active) == [true, false])
        #expect(clear[1].at - clear[0].at == 150 * Self.ms)
    }

    @Test func alertIsThreePulsesOf80MillisecondsWithGapsOf80() {
        let alert = edges(.alert)
        #expect(alert.map(\.active) == [true, false, true, false, true, false])
        #expect(zip(alert, alert.dropFirst()).map { ($1.at - $0.at) / Self.ms } == [80, 80, 80, 80, 80])
    }

    @Test func aLateWakeUpShiftsTheRestButShortensNothing() {
        let late = edges(.alert, late: 30 * Self.ms)
        // Each time counts from the edge before it, set 30 ms late: every step is 80 + 30 ms.
        #expect(zip(late, late.dropFirst()).map { ($1.at - $0.at) / Self.ms } == [110, 110, 110, 110, 110])
    }

    @Test func aTrailingGapChangesNothing() throws {
        let trailing = edges(try HapticPattern([40, 40, 40, 2000]))
        #expect(trailing.map(\.active) == [true, false, true, false])
        #expect(trailing.last!.at - trailing.first!.at == 120 * Self.ms, "over when the last pulse ends, not 2 s later")
    }

    @Test func aNewerPatternCutsTheOnePlayingAndTimesItsOwnFromItsStart() throws {
        var machine = Machine()
        let long = try HapticPattern([5000, 5000, 5000], name: "long")
        let r1 = machine.started(long, at: t0)
        #expect(r1 == nil)
        #expect(machine.mustEndPulseFirst, "its pulse is on: a new start ends it first")
        machine.lineSetInactive()
        let cut = machine.started(.clear, at: t0 + 100 * Self.ms)
        #expect(cut == long)
        #expect(machine.due == t0 + 250 * Self.ms, "the clear pulse, from its own start")
        #expect(machine.nextLevel == false)
        let r2 = machine.edgeSet(at: t0 + 250 * Self.ms)
        #expect(r2, "and nothing of the long pattern after it")
    }

    @Test func aStoppedPatternLeavesNothingDueAndTheLineWhereItWas() {
        var machine = Machine()
        _ = machine.started(.alert, at: t0)
        machine.stopped(lineActive: true)
        #expect(machine.due == nil && machine.nextLevel == nil)
        #expect(machine.mustEndPulseFirst, "a line that could not be driven inactive is still on")
        let r3 = machine.edgeSet(at: t0)
        #expect(!r3, "no edge without a pattern")
    }
}
