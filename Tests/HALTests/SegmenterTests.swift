import Foundation
import HAL
import TestSupport
import Testing

/// Real libx265 encoding of the test pattern through the segmenter, checked with ffprobe.
@Suite struct SegmenterTests {
    let format = VideoFormat(width: 320, height: 180, fps: 10)

    func encoder() throws -> LibavEncoder {
        try LibavEncoder(
            settings: EncoderSettings(
                preference: ["libx265"], rateControl: .crf(28), format: format,
                keyframeInterval: 50),
            inputFormat: .yuv420p)
    }

    /// Encodes `count` test-pattern frames, skipping `missing` frame numbers, and closes early with `reason`.
    func record(_ count: Int, missing: Set<Int> = [], closeWith reason: SegmentEndReason? = nil) throws -> [EncodedSegment] {
        let source = TestPatternSource(format: format, realtime: false)
        _ = try source.open()
        let encoder = try encoder()
        let segmenter = Segmenter(format: format, segmentSeconds: 5)
        for n in 0..<count {
            let frame = try #require(try source.nextFrame())
            if missing.contains(n) { continue }
            let placement = try #require(segmenter.place(frame))
            try encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
        }
        if let reason {
            try encoder.flush(into: segmenter)
            try segmenter.close(reason: reason)
        }
        return segmenter.takeClosed()
    }

    /// The wall clock steps an hour back while the third segment is recorded (NTP after a boot with
    /// a clock ahead): that segment keeps the time it began with, the fourth and later are dated
    /// by the new clock (a new timeline), say so, and stay a segment's length apart; the location
    /// asked for goes into the MP4.
    @Test func aClockStepStartsANewTimelineAtTheNextSegment() throws {
        final class Offset: @unchecked Sendable { var value = 1_795_700_000.0 }
        let offset = Offset()
        let source = TestPatternSource(format: format, realtime: false)
        _ = try source.open()
        let encoder = try encoder()
        let segmenter = Segmenter(
            format: format, segmentSeconds: 1, locate: { _, _ in "+37.5665+126.9780+035.000/" }, wallOffset: { offset.value })
        for n in 0..<40 {
            if n == 25 { offset.value -= 3600 }
            let frame = try #require(try source.nextFrame())
            let placement = try #require(segmenter.place(frame))
            try encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
        }
        let segments = segmenter.takeClosed()
        #expect(segments.count == 4)
        let times = segments.map(\.metadata.capturedAt.timeIntervalSince1970)
        #expect(abs(times[1] - times[0] - 1) < 1e-6 && abs(times[2] - times[1] - 1) < 1e-6)
        #expect(abs(times[3] - times[2] - 1 + 3600) < 1e-6, "dated by the new clock from the fourth on")
        #expect(segments.map(\.clockStepSeconds) == [nil, nil, nil, -3600])
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("located-\(UUID().uuidString).mp4")
        try Data(segments[0].data).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let location = try Command.execute("ffprobe", ["-v", "error", "-show_entries", "format_tags=location", "-of", "csv=p=0", file.path])
        // FFmpeg writes it as it reads it: latitude, longitude, then the altitude in its own form.
        #expect(location.stdout.hasPrefix("+37.5665+126.9780+35"), "\(location)")
    }

    func probe(_ segment: EncodedSegment) throws -> ProbedSegment {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("segment-\(UUID().uuidString).mp4")
        try Data(segment.data).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        return try FFprobe.probe(file)
    }

    @Test func fullSegmentsHoldFiftyFramesOneIDRAndMoovFirst() throws {
        let segments = try record(100)
        #expect(segments.count == 2)
        for (index, segment) in segments.enumerated() {
            let probed = try probe(segment)
            #expect(probed.codec == "hevc")
            #expect(probed.tag == "hvc1")
            #expect(probed.frames == 50)
            #expect(abs(probed.duration - 5.0) <= 0.1)
            #expect(probed.keyFrames.first == true)
            #expect(probed.keyframeCount == 1)
            #expect(probed.startsWithIDR)
            #expect(probed.moovBeforeMdat)
            let m = segment.metadata
            #expect(m.seq == index)
            #expect(m.frames == 50 && m.droppedFrames == 0 && m.complete && m.endReason == .complete)
            #expect(m.durationMs == 5000)
            #expect(m.bytes == segment.data.count)
            #expect(m.sha256.count == 64)
            #expect(m.encoder == "libx265")
        }
        #expect(segments[1].metadata.captureStartMonotonicNs - segments[0].metadata.captureStartMonotonicNs == 5_000_000_000)
        #expect(segments[0].metadata.sha256 != segments[1].metadata.sha256)
    }

    @Test func droppedFramesAreCountedAndTheSegmentStaysValid() throws {
        let segments = try record(60, missing: [7, 8, 9, 49, 50], closeWith: .shutdown)
        #expect(segments.count == 2)
        let first = segments[0].metadata, second = segments[1].metadata
        #expect(first.frames == 46 && first.droppedFrames == 4 && !first.complete)
        #expect(first.endReason == .complete)
        // Slot 50 was dropped: the second segment starts at slot 51 with an IDR.
        #expect(second.frames == 9 && second.droppedFrames == 1 && second.endReason == .shutdown)
        let probed = try probe(segments[1])
        #expect(probed.frames == 9)
        #expect(probed.keyframeCount == 1 && probed.startsWithIDR)
        #expect(try probe(segments[0]).frames == 46)
    }

    @Test func anEarlyCloseGivesAShorterValidSegment() throws {
        let segments = try record(73, closeWith: .cameraLost)
        #expect(segments.map(\.metadata.frames) == [50, 23])
        let last = segments[1].metadata
        #expect(last.endReason == .cameraLost && !last.complete && last.durationMs == 2300)
        let probed = try probe(segments[1])
        #expect(probed.frames == 23)
        #expect(abs(probed.duration - 2.3) <= 0.1)
        #expect(probed.keyframeCount == 1 && probed.startsWithIDR && probed.moovBeforeMdat)
    }
}

/// A slower timeline that follows another: the guidance copy's slots from the evidence's.
@Suite struct FollowingClockTests {
    @Test func everyThirdFrameAndEverySegmentStartOfTheFasterTimeline() {
        var fast = SegmentClock(fps: 30, segmentSeconds: 1)
        var slow = SegmentClock(fps: 10, segmentSeconds: 1)
        var taken: [(Int64, Int64, Bool)] = []
        // 30 fps for two seconds, with the frames at slots 30 and 31 (the second segment's first) lost.
        for n in 0..<60 where n != 30 && n != 31 {
            let time = 1_000_000 + UInt64(n) * 1_000_000_000 / 30
            guard let placement = fast.place(timestamp: time) else { continue }
            if let copy = slow.place(following: placement.slot, fps: 30, timestamp: time) {
                taken.append((placement.slot, copy.slot, copy.startsSegment))
                #expect(copy.startsSegment == placement.startsSegment, "slot \(placement.slot)")
            }
        }
        #expect(taken.map(\.0) == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 32, 33, 36, 39, 42, 45, 48, 51, 54, 57])
        #expect(taken.map(\.1) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
        // The first frame of the second segment is the one the faster timeline starts it with.
        #expect(taken.filter(\.2).map(\.0) == [0, 32])
        #expect(slow.time(ofSlot: 10) == fast.time(ofSlot: 30))
    }

    @Test func afterARestartBothTimelinesBeginAtTheSameFrame() {
        var fast = SegmentClock(fps: 25, segmentSeconds: 2)
        var slow = SegmentClock(fps: 5, segmentSeconds: 2)
        _ = slow.place(following: fast.place(timestamp: 100)!.slot, fps: 25, timestamp: 100)
        fast.restart()
        slow.restart()
        let placement = fast.place(timestamp: 9_000_000_000)!
        #expect(slow.place(following: placement.slot, fps: 25, timestamp: 9_000_000_000) == .init(slot: 0, startsSegment: true))
        #expect(slow.anchor == fast.anchor)
    }
}
