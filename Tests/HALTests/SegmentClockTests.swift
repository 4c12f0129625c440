import HAL
import Testing

@Suite struct SegmentClockTests {
    let period: UInt64 = 100_000_000  // 10 fps
    let start: UInt64 = 7_000_000_000

    @Test func steadyFramesFillEverySlotAndCutEveryFiftyFrames() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        let placements = (0..<120).compactMap { clock.place(timestamp: start + UInt64($0) * period) }
        #expect(placements.map(\.slot) == (0..<120).map { Int64($0) })
        #expect(placements.filter(\.startsSegment).map(\.slot) == [0, 50, 100])
    }

    @Test func jitterBelowHalfAPeriodDoesNotMoveFrames() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        let jitter: [Int64] = [0, 30_000_000, -40_000_000, 45_000_000, -20_000_000]
        let slots = (0..<60).compactMap { n -> Int64? in
            let t = Int64(start) + Int64(n) * Int64(period) + (n == 0 ? 0 : jitter[n % jitter.count])
            return clock.place(timestamp: UInt64(t))?.slot
        }
        #expect(slots == (0..<60).map { Int64($0) })
    }

    @Test func droppedFramesLeaveEmptySlotsAndAFirstFrameAfterTheCutStartsTheSegment() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        // Frames 3, 4 and 50, 51 never arrive.
        let arriving = (0..<60).filter { ![3, 4, 50, 51].contains($0) }
        let placements = arriving.compactMap { clock.place(timestamp: start + UInt64($0) * period) }
        #expect(placements.map(\.slot) == arriving.map { Int64($0) })
        #expect(placements.filter(\.startsSegment).map(\.slot) == [0, 52])
    }

    @Test func aFasterSourceIsThinnedToTheConfiguredRate() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        // 30 fps in: one frame per slot survives (frame 89, at 29.67 periods, takes slot 30).
        let placed = (0..<90).compactMap { clock.place(timestamp: start + UInt64($0) * period / 3) }
        #expect(placed.map(\.slot) == (0...30).map { Int64($0) })
    }

    @Test func restartAnchorsTheNextFrameAtSlotZero() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        for n in 0..<23 { _ = clock.place(timestamp: start + UInt64(n) * period) }
        clock.restart()
        let later = start + 60 * period + 12_345
        let first = clock.place(timestamp: later)
        #expect(first == .init(slot: 0, startsSegment: true))
        #expect(clock.anchor == later)
        #expect(clock.time(ofSlot: 50) == later + 5_000_000_000)
    }

    @Test func framesOlderThanTheAnchorAreSkipped() {
        var clock = SegmentClock(fps: 10, segmentSeconds: 5)
        _ = clock.place(timestamp: start)
        #expect(clock.place(timestamp: start - period) == nil)
        #expect(clock.place(timestamp: start + 10_000_000) == nil)
    }
}
