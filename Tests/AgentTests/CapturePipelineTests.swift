@testable import Agent
import HAL
import Logging
import Testing

/// A camera that is unplugged after `framesBeforeLoss` frames, refuses to reopen once, then
/// delivers `framesAfterReturn` frames and ends (also the two-stream tests' camera).
final class UnpluggedCamera: FrameSource {
    let name = "/dev/fake-camera"
    let pattern: TestPatternSource
    var pixelFormat: PixelFormat { pattern.pixelFormat }
    private var script: [Int]
    private var delivered = 0
    private(set) var opens = 0
    private var failNextOpen = false

    init(format: VideoFormat, framesBeforeLoss: Int, framesAfterReturn: Int) {
        pattern = TestPatternSource(format: format, realtime: false)
        script = [framesBeforeLoss, framesAfterReturn]
    }

    func open() throws -> VideoFormat {
        opens += 1
        if failNextOpen {
            failNextOpen = false
            throw SourceError.notFound(name)
        }
        delivered = 0
        return try pattern.open()
    }

    func nextFrame() throws -> Frame? {
        guard let limit = script.first else { return nil }
        if delivered == limit {
            script.removeFirst()
            if script.isEmpty { return nil }
            failNextOpen = true
            throw SourceError.lost(name, "ENODEV")
        }
        delivered += 1
        return try pattern.nextFrame()
    }

    func close() {}
}

@Suite struct CapturePipelineTests {
    let format = VideoFormat(width: 160, height: 96, fps: 10)

    func settings(maxSegments: Int? = nil) -> CapturePipeline.Settings {
        .init(
            encoder: EncoderSettings(preference: ["libx265"], rateControl: .crf(28), format: format, keyframeInterval: 50),
            segmentSeconds: 5, reopenBackoffMs: (1, 4), maxSegments: maxSegments)
    }

    func hevc(_ inputFormat: PixelFormat) throws -> any VideoEncoder {
        try LibavEncoder(settings: settings().encoder, inputFormat: inputFormat)
    }

    @Test func aLostCameraClosesTheSegmentEarlyAndRecordingResumesAfterReopen() async throws {
        let camera = UnpluggedCamera(format: format, framesBeforeLoss: 73, framesAfterReturn: 60)
        let pipeline = try CapturePipeline(source: camera, settings: settings(), encoder: hevc, logger: Logger(label: "test"))
        pipeline.start()
        var segments: [SegmentMetadata] = []
        for try await segment in pipeline.segments { segments.append(segment.metadata) }

        #expect(segments.map(\.frames) == [50, 23, 50, 10])
        #expect(segments.map(\.endReason) == [.complete, .cameraLost, .complete, .endOfInput])
        #expect(segments.map(\.seq) == [0, 1, 2, 3])
        #expect(segments.map(\.complete) == [true, false, true, false])
        // Initial open, one refused reopen, one that worked.
        #expect(camera.opens == 3)
    }

    @Test func maxSegmentsEndsThePipeline() async throws {
        let source = TestPatternSource(format: format, realtime: false)
        let pipeline = try CapturePipeline(source: source, settings: settings(maxSegments: 2), encoder: hevc, logger: Logger(label: "test"))
        pipeline.start()
        var count = 0
        for try await segment in pipeline.segments {
            count += 1
            #expect(segment.metadata.frames == 50)
        }
        #expect(count == 2)
    }

    @Test func aMissingCameraFailsBeforeAnythingRuns() throws {
        let camera = V4L2Camera(options: .init(device: "/dev/no-such-video", format: format), logger: Logger(label: "test"))
        #expect(throws: SourceError.notFound("/dev/no-such-video")) {
            _ = try CapturePipeline(source: camera, settings: settings(), encoder: hevc, logger: Logger(label: "test"))
        }
    }

    @Test func aConsumerThatFallsBehindLosesTheOldestSegmentsCounted() async throws {
        let produced = CapturePipeline.bufferedSegments + 2
        let pipeline = try CapturePipeline(
            source: TestPatternSource(format: format, realtime: false), settings: settings(maxSegments: produced), encoder: hevc,
            logger: Logger(label: "test"))
        pipeline.start()
        // Nobody reads the segments until the capture thread has ended (its events end with it).
        for await _ in pipeline.events {}
        var received: [Int] = []
        for try await segment in pipeline.segments { received.append(segment.metadata.seq) }
        #expect(received == Array(2..<produced), "the stream holds the newest \(CapturePipeline.bufferedSegments)")
        #expect(pipeline.droppedSegments == 2)
    }
}
