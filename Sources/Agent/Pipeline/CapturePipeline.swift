import Foundation
public import HAL
public import Logging
import Synchronization

/// The data path: `source.nextFrame() → segmenter.place → encoder.encode → segmenter → segments`,
/// and each frame offered to the ``FrameTap`` (the local road checks), which copies what it takes.
///
/// Capture and encoding run on a thread of their own, because a camera blocks in `poll`; finished
/// segments (one every few seconds) leave through ``segments``. A lost or stalled camera closes the
/// segment in progress early, then the source is reopened with bounded backoff: the pipeline only
/// ends at the end of a file, after `maxSegments`, on ``stop()``, or on an encoder failure.
public final class CapturePipeline: Sendable {
    public struct Settings: Sendable {
        public var encoder: EncoderSettings
        public var segmentSeconds: Int
        /// Delay before reopening a lost camera: doubles from the first value up to the second.
        public var reopenBackoffMs: (min: Int, max: Int)
        /// Stop after this many segments (`nil`: run until stopped).
        public var maxSegments: Int?
        /// The GPS track each segment gets (its metadata, its MP4's location); nil without GPS.
        public var locate: Segmenter.Locate?
        /// Where the wall clock's time comes from, for each segment's metadata.
        public var clockSource: Segmenter.ClockSource?
        /// How a parked car is watched (``CapturePipeline/park()``); nil: never parked.
        public var parked: ParkedCapture?

        public init(encoder: EncoderSettings, segmentSeconds: Int, reopenBackoffMs: (min: Int, max: Int), maxSegments: Int?) {
            self.encoder = encoder
            self.segmentSeconds = segmentSeconds
            self.reopenBackoffMs = reopenBackoffMs
            self.maxSegments = maxSegments
        }
    }

    /// Finished segments, oldest first; ends when the pipeline ends, throwing if it failed.
    ///
    /// Holds at most ``bufferedSegments``: a consumer that falls that far behind (a disk that
    /// stalls for half a minute) loses the oldest waiting segment rather than the capture thread
    /// waiting, which would lose frames of the road ahead instead. Each loss is counted in
    /// ``droppedSegments``.
    public let segments: AsyncThrowingStream<Segment, any Error>
    private let continuation: AsyncThrowingStream<Segment, any Error>.Continuation
    /// The camera going and coming back, as it happens (not a segment later).
    public let events: AsyncStream<CameraEvent>
    private let eventSink: AsyncStream<CameraEvent>.Continuation
    /// When frames and segments last came out, for the service watchdog.
    public let health = PipelineHealth()
    /// For `status`: the source and the format it opened with, and the encoder in use.
    public let cameraName: String
    public let cameraFormat: String
    public let encoderName: String
    private let stopRequested = Atomic<Bool>(false)
    private let parkRequested = Atomic<Bool>(false)
    private let impacts = Atomic<Int>(0)
    private let clipsStarted = Atomic<Int>(0)
    private let framesWatched = Atomic<Int>(0)
    private let dropped = Atomic<Int>(0)
    private let state: Mutex<CaptureLoop?>

    /// Segments the stream holds for a slow consumer (six 5-second segments: 30 s of video).
    public static let bufferedSegments = 6
    /// Segments the consumer was too far behind to take (see ``segments``).
    public var droppedSegments: Int { dropped.load(ordering: .relaxed) }

    /// Opens the source, then the encoder with `makeEncoder` (given the pixel format the source
    /// delivers), so a missing device or a machine without a working encoder fails here, before
    /// anything runs. Which encoder is the caller's choice: the agent's is
    /// ``AgentConfig/makeEncoder(inputFormat:logger:)``.
    public init(source: any FrameSource, settings: Settings,
                encoder makeEncoder: (_ inputFormat: PixelFormat) throws -> any VideoEncoder,
                tap: (any FrameTap)? = nil, logger: Logger) throws {
        let format = try source.open()
        logger.info("camera: \(source.name) opened", metadata: ["format": "\(format)", "pixelFormat": "\(source.pixelFormat)"])
        let encoder = try makeEncoder(source.pixelFormat)
        logger.info("encoder: \(encoder.name)", metadata: [
            "format": "\(settings.encoder.format)", "pixelFormat": "\(encoder.encoderPixelFormat)",
            "swscale": "\(source.pixelFormat != encoder.encoderPixelFormat || format.width != settings.encoder.format.width || format.height != settings.encoder.format.height)",
        ])
        (segments, continuation) = AsyncThrowingStream.makeStream(bufferingPolicy: .bufferingNewest(Self.bufferedSegments))
        cameraName = source.name
        cameraFormat = "\(format) \(source.pixelFormat)"
        encoderName = encoder.name
        (events, eventSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
        state = Mutex(CaptureLoop(source: source, encoder: encoder, settings: settings, tap: tap, logger: logger, events: eventSink, health: health))
    }

    /// Starts capturing on a thread of its own.
    public func start() {
        guard let loop = state.withLock({ $0.take() }) else { return }
        let emit: @Sendable (Segment) -> Void = { [self, logger = loop.logger] segment in
            if case .dropped(let oldest) = continuation.yield(segment) {
                let total = dropped.add(1, ordering: .relaxed).newValue
                logger.error("pipeline: segment \(oldest.metadata.seq) dropped: \(Self.bufferedSegments) segments were waiting for the disk and the uplink", metadata: ["droppedTotal": "\(total)"])
            }
        }
        do {
            try NamedThread.start(name: "capture") { [self] in
                do {
                    try loop.run(emit: emit, control: .init(
                        stopRequested: { self.stopRequested.load(ordering: .relaxed) },
                        parkRequested: { self.parkRequested.load(ordering: .relaxed) },
                        takeImpacts: { self.impacts.exchange(0, ordering: .relaxed) },
                        clipStarted: { self.clipsStarted.add(1, ordering: .relaxed) },
                        frameWatched: { self.framesWatched.add(1, ordering: .relaxed) }))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
                eventSink.finish()
            }.detach()
        } catch {
            continuation.finish(throwing: error)
            eventSink.finish()
        }
    }

    /// Asks the pipeline to close the segment in progress and end.
    public func stop() {
        stopRequested.store(true, ordering: .relaxed)
    }

    /// The car is parked: close the segment in progress, stop continuous recording and watch
    /// the parked car (``Settings/parked``) until ``drive()``. Ignored without those settings.
    public func park() { parkRequested.store(true, ordering: .relaxed) }

    /// Driving again: continuous recording resumes (a clip in progress is closed first).
    public func drive() { parkRequested.store(false, ordering: .relaxed) }

    /// Clips a parked car has started recording since the pipeline started.
    public var parkedClips: Int { clipsStarted.load(ordering: .relaxed) }
    /// Frames the parked watch has looked at since the pipeline started.
    public var parkedFrames: Int { framesWatched.load(ordering: .relaxed) }

    /// The G-sensor felt an impact while parked: a clip is recorded with its pre-roll.
    public func impact() { impacts.add(1, ordering: .relaxed) }
}

/// `CLOCK_MONOTONIC` nanoseconds of the last encoded frame and the last closed segment (0: none yet).
public final class PipelineHealth: Sendable {
    private let lastFrame = Atomic<UInt64>(0)
    private let lastSegment = Atomic<UInt64>(0)
    private let firstFrame = Atomic<UInt64>(0)

    public init() {}

    func frameEncoded() {
        let now = MonotonicClock.now()
        lastFrame.store(now, ordering: .relaxed)
        _ = firstFrame.compareExchange(expected: 0, desired: now, ordering: .relaxed)
    }

    func segmentClosed() { lastSegment.store(MonotonicClock.now(), ordering: .relaxed) }

    /// A parked car's frame was looked at: no segment is due while parked, so the watchdog
    /// counts the parked watch's progress as both.
    func parkedFrame() {
        let now = MonotonicClock.now()
        lastFrame.store(now, ordering: .relaxed)
        lastSegment.store(now, ordering: .relaxed)
    }

    public var lastFrameNs: UInt64 { lastFrame.load(ordering: .relaxed) }
    public var lastSegmentNs: UInt64 { lastSegment.load(ordering: .relaxed) }
    public var firstFrameNs: UInt64 { firstFrame.load(ordering: .relaxed) }
}

public enum CameraEvent: Sendable, Equatable {
    /// Lost (unplugged) or stalled; the pipeline keeps trying to reopen it.
    case lost(reason: String)
    case back
}

/// The capture loop's state; owned by the capture thread once started.
struct CaptureLoop: @unchecked Sendable {
    /// What the owner asks of the capture thread, read between frames.
    struct Control {
        let stopRequested: () -> Bool
        let parkRequested: () -> Bool
        /// Impacts felt since the last call.
        let takeImpacts: () -> Int
        let clipStarted: () -> Void
        let frameWatched: () -> Void
    }

    let source: any FrameSource
    let encoder: any VideoEncoder
    let settings: CapturePipeline.Settings
    let tap: (any FrameTap)?
    let logger: Logger
    let events: AsyncStream<CameraEvent>.Continuation
    let health: PipelineHealth

    func run(emit: (Segment) -> Void, control: Control) throws {
        let stopRequested = control.stopRequested
        var segmenter = Segmenter(format: settings.encoder.format, segmentSeconds: settings.segmentSeconds, locate: settings.locate,
                                  clockSource: settings.clockSource)
        var emitted = 0
        func deliver() -> Bool {
            for segment in segmenter.takeClosed() {
                health.segmentClosed()
                emit(segment)
                emitted += 1
            }
            return settings.maxSegments.map { emitted >= $0 } ?? false
        }
        func closeEarly(_ reason: SegmentEndReason) throws {
            try encoder.flush(into: segmenter)
            try segmenter.close(reason: reason)
        }
        defer { source.close() }

        while true {
            if stopRequested() {
                try closeEarly(.shutdown)
                _ = deliver()
                return
            }
            if let parked = settings.parked, control.parkRequested() {
                // Continuous recording stops with the segment in progress; the parked watch
                // opens the camera at its own rate, and gives it back when driving resumes.
                try closeEarly(.parked)
                if deliver() { return }
                source.close()
                let (nextSeq, ended) = try runParked(parked, firstSeq: segmenter.upcomingSeq, emit: emit, control: control)
                if stopRequested() || ended { return }
                try encoder.restart()
                segmenter = Segmenter(format: settings.encoder.format, segmentSeconds: settings.segmentSeconds, firstSeq: nextSeq,
                                      locate: settings.locate, clockSource: settings.clockSource)
                logger.notice("driving: continuous recording resumes")
                _ = open(source, stopRequested: stopRequested)
                continue
            }
            let frame: Frame
            do {
                guard let next = try source.nextFrame() else {
                    try closeEarly(.endOfInput)
                    _ = deliver()
                    logger.info("source: \(source.name) ended")
                    return
                }
                frame = next
            } catch let error as SourceError where error.isRecoverable {
                logger.error("\(error)")
                events.yield(.lost(reason: "\(error)"))
                try closeEarly(error.isLost ? .cameraLost : .cameraStalled)
                if deliver() { return }
                source.close()
                // A flushed encoder takes no more frames, and the reopened camera starts a new timeline.
                try encoder.restart()
                segmenter.restartTimeline()
                reopen(source, stopRequested: stopRequested)
                continue
            }
            tap?.offer(frame)
            guard let placement = segmenter.place(frame) else { continue }
            try encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
            health.frameEncoded()
            if deliver() { return }
        }
    }

    /// Opens the source at once, or with doubling delays if it does not; false if a stop came first.
    func open(_ source: any FrameSource, stopRequested: () -> Bool) -> Bool {
        do {
            _ = try source.open()
            return true
        } catch {
            logger.warning("camera: \(source.name) does not open: \(error)")
            reopen(source, stopRequested: stopRequested)
            return !stopRequested()
        }
    }

    /// Reopens the source with doubling delays, until it opens or a stop is requested.
    func reopen(_ source: any FrameSource, stopRequested: () -> Bool) {
        var delay = settings.reopenBackoffMs.min
        while !stopRequested() {
            let deadline = MonotonicClock.now() + UInt64(delay) * 1_000_000
            // Sleep in short steps so a stop is not held up by a long backoff.
            while MonotonicClock.now() < deadline && !stopRequested() {
                MonotonicClock.sleep(until: min(deadline, MonotonicClock.now() + 100_000_000))
            }
            if stopRequested() { return }
            do {
                let format = try source.open()
                logger.notice("camera back: \(source.name)", metadata: ["format": "\(format)"])
                events.yield(.back)
                return
            } catch {
                logger.warning("camera: \(source.name) not back yet: \(error)", metadata: ["retryInMs": "\(delay)"])
                delay = min(delay * 2, settings.reopenBackoffMs.max)
            }
        }
    }
}
