import HAL
import Testing

/// The test pattern as a camera: paced at its rate, and losing what a late reader leaves behind.
@Suite struct TestPatternSourceTests {
    let format = VideoFormat(width: 64, height: 36, fps: 100)
    var period: UInt64 { 1_000_000_000 / UInt64(format.fps) }

    /// A reader 20 frames late finds the newest few, not the first: the frames between are a gap
    /// in the sequence, and each frame's time is still its slot's, so the gap is counted as dropped.
    @Test func aLateReaderLosesTheFramesItsBuffersCouldNotHold() throws {
        let source = TestPatternSource(format: format, realtime: true)
        _ = try source.open()
        let first = try #require(try source.nextFrame())
        // Late by 20 frames at least, however long the sleep really takes.
        MonotonicClock.sleep(until: first.timestamp + 20 * period)
        let late = try #require(try source.nextFrame())
        #expect(late.sequence >= 20 - TestPatternSource.heldFrames, "\(late.sequence)")
        #expect(late.timestamp - first.timestamp == (late.sequence - first.sequence) * period)
        let next = try #require(try source.nextFrame())
        #expect(next.sequence > late.sequence && next.timestamp - late.timestamp == (next.sequence - late.sequence) * period)
    }

    /// Unpaced (`fast`), every frame comes, however late it is read.
    @Test func aFastPatternLosesNothing() throws {
        let source = TestPatternSource(format: format, realtime: false)
        _ = try source.open()
        let first = try #require(try source.nextFrame())
        MonotonicClock.sleep(until: MonotonicClock.now() + 20 * period)
        let second = try #require(try source.nextFrame())
        #expect(second.sequence == first.sequence + 1 && second.timestamp - first.timestamp == period)
    }
}
