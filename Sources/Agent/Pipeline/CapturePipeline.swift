public import Foundation
public import GuidanceProtocol
public import HAL
public import Logging
import Synchronization

/// The data path: `source.nextFrame() → segmenter.place → encoder.encode → segmenter → segments`,
/// and each frame offered to the ``FrameTap`` (the local road checks), which copies what it takes.
///
/// With a guidance copy (``Settings/guidance``, `uplink.video`) the same frame goes on to a second
/// stream: the frames that copy's slower timeline takes are scaled once (``FrameScaler``), offered
/// to the tap in place of the full ones, and encoded into segments of their own; the two streams'
/// segments from the same first frame come out as a pair (``SegmentPairing``).
///
/// Capture and encoding run on a thread of their own, because a camera blocks in `poll`; finished
/// segments (one every few seconds) leave through ``segments``. A lost or stalled camera closes the
/// segment in progress early, then the source is reopened with bounded backoff: the pipeline only
/// ends at the end of a file, after `maxSegments`, on ``stop()``, or on an encoder failure.
public final class CapturePipeline: Sendable {
    public struct Settings: Sendable {
        /// The recording's encoder (the evidence stream, or the one stream).
        public var encoder: EncoderSettings
        /// The small copy that goes to the server; nil: one stream, recorded and sent.
        public var guidance: EncoderSettings?
        public var segmentSeconds: Int
        /// Delay before reopening a lost camera: doubles from the first value up to the second.
        public var reopenBackoffMs: (min: Int, max: Int)
        /// Stop after this many segments (`nil`: run until stopped).
        public var maxSegments: Int?
        /// The GPS track of a wall-clock span, asked when a segment closes (on the capture thread:
        /// it must answer at once): the segment's notes, its MP4's location; nil without GPS.
        public var track: (@Sendable (_ from: Date, _ to: Date) -> [GPSPosition])?
        /// Where the wall clock's time comes from (`gps`, `ntp`, …), for each segment's notes.
        public var clockSource: (@Sendable () -> String)?
        /// How a parked car is watched (``CapturePipeline/park()``); nil: never parked.
        public var parked: ParkedCapture?
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
    /// The guidance copy's encoder, with two streams.
    public let guidanceEncoderName: String?
    private let stopRequested = Atomic<Bool>(false)
    private let parkRequested = Atomic<Bool>(false)
    private let impacts = Atomic<Int>(0)
    private let clipsStarted = Atomic<Int>(0)
    private let framesWatched = Atomic<Int>(0)
    private let dropped = Atomic<Int>(0)
    private let state: Mutex<CaptureLoop?>

    /// Segments the stream holds for a slow consumer (six 5-second segments: 30 s of video; with
    /// a guidance copy, twice as many: six of each).
    public static let bufferedSegments = 6
    /// Segments the consumer was too far behind to take (see ``segments``).
    public var droppedSegments: Int { dropped.load(ordering: .relaxed) }

    /// Opens the source, then the encoder with `makeEncoder` (given the pixel format the source
    /// delivers), so a missing device or a machine without a working encoder fails here, before
    /// anything runs. Which encoder is the caller's choice: the agent's is
    /// ``AgentConfig/makeEncoder(inputFormat:logger:)``.
    /// With ``Settings/guidance``, `makeGuidanceEncoder` opens the copy's encoder the same way
    /// (given the source's pixel format: the scaler converts to the one it takes).
    public init(
        source: any FrameSource, settings: Settings,
        encoder makeEncoder: (_ inputFormat: PixelFormat) throws -> any VideoEncoder,
        guidanceEncoder makeGuidanceEncoder: ((_ inputFormat: PixelFormat) throws -> any VideoEncoder)? = nil,
        tap: (any FrameTap)? = nil, logger: Logger
    ) throws {
        let format = try source.open()
        logger.info("camera: \(source.name) opened", metadata: ["format": "\(format)", "pixelFormat": "\(source.pixelFormat)"])
        let encoder = try makeEncoder(source.pixelFormat)
        logger.info(
            "encoder: \(encoder.name)\(settings.guidance == nil ? "" : " (evidence)")",
            metadata: [
                "format": "\(settings.encoder.format)", "pixelFormat": "\(encoder.encoderPixelFormat)",
                "swscale":
                    "\(source.pixelFormat != encoder.encoderPixelFormat || format.width != settings.encoder.format.width || format.height != settings.encoder.format.height)"
            ])
        var copy: GuidanceCopy?
        if let guidance = settings.guidance, let makeGuidanceEncoder {
            let copyEncoder = try makeGuidanceEncoder(source.pixelFormat)
            copy = GuidanceCopy(
                encoder: copyEncoder,
                scaler: try FrameScaler(
                    width: guidance.format.width, height: guidance.format.height, pixelFormat: copyEncoder.encoderPixelFormat),
                settings: guidance)
            logger.info(
                "encoder: \(copyEncoder.name) (guidance)",
                metadata: [
                    "format": "\(guidance.format)", "pixelFormat": "\(copyEncoder.encoderPixelFormat)"
                ])
        }
        let buffered = copy == nil ? Self.bufferedSegments : 2 * Self.bufferedSegments
        (segments, continuation) = AsyncThrowingStream.makeStream(bufferingPolicy: .bufferingNewest(buffered))
        cameraName = source.name
        cameraFormat = "\(format) \(source.pixelFormat)"
        encoderName = encoder.name
        guidanceEncoderName = copy?.encoder.name
        (events, eventSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
        state = Mutex(
            CaptureLoop(
                source: source, encoder: encoder, guidance: copy, settings: settings, tap: tap, logger: logger,
                events: eventSink, health: health))
    }

    /// Starts capturing on a thread of its own.
    public func start() {
        guard let loop = state.withLock({ $0.take() }) else { return }
        let emit: @Sendable (Segment) -> Void = { [self, logger = loop.logger] segment in
            if case .dropped(let oldest) = continuation.yield(segment) {
                let total = dropped.add(1, ordering: .relaxed).newValue
                logger.error(
                    "pipeline: segment \(oldest.metadata.seq)\(oldest.metadata.stream.map { " (\($0.rawValue))" } ?? "") dropped: the disk and the uplink were \(Self.bufferedSegments) segments behind",
                    metadata: ["droppedTotal": "\(total)"])
            }
        }
        do {
            try NamedThread.start(name: "capture") { [self] in
                do {
                    try loop.run(
                        emit: emit,
                        control: .init(
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

extension CapturePipeline.Settings {
    /// The MP4's location of a span: the first position of its track.
    var location: Segmenter.Locate? {
        guard let track else { return nil }
        return { from, to in track(from, to).lazy.compactMap { $0.iso6709 }.first }
    }

    /// A segment of the recording as it leaves its segmenter, with what the agent adds: the GPS
    /// track over its span and the wall clock's state (a guidance copy takes its partner's).
    func noted(_ encoded: EncodedSegment) -> Segment {
        let from = encoded.metadata.capturedAt
        let notes = SegmentNotes(
            gps: track?(from, from.addingTimeInterval(Double(encoded.metadata.durationMs) / 1000)),
            clock: SegmentClockState(
                synced: WallClock.isSynchronised, source: clockSource?() ?? "unknown", steppedSeconds: encoded.clockStepSeconds))
        return Segment(encoded, notes: notes)
    }
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

/// The guidance stream's own parts: its encoder, the scaler that makes its frames, its settings.
struct GuidanceCopy {
    let encoder: any VideoEncoder
    let scaler: FrameScaler
    let settings: EncoderSettings
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
    let guidance: GuidanceCopy?
    let settings: CapturePipeline.Settings
    let tap: (any FrameTap)?
    let logger: Logger
    let events: AsyncStream<CameraEvent>.Continuation
    let health: PipelineHealth

    func run(emit: (Segment) -> Void, control: Control) throws {
        let stopRequested = control.stopRequested
        func segmenters(from seq: Int) -> (evidence: Segmenter, guidance: Segmenter?) {
            (
                Segmenter(
                    format: settings.encoder.format, segmentSeconds: settings.segmentSeconds, firstSeq: seq,
                    locate: settings.location),
                guidance.map { Segmenter(format: $0.settings.format, segmentSeconds: settings.segmentSeconds, firstSeq: seq) }
            )
        }
        var (segmenter, copySegmenter) = segmenters(from: 0)
        var pairing = SegmentPairing()
        var emitted = 0
        func deliver(draining: Bool = false) -> Bool {
            for segment in segmenter.takeClosed().map(settings.noted) {
                health.segmentClosed()
                if copySegmenter == nil {
                    emit(segment)
                    emitted += 1
                } else {
                    for ready in pairing.add(segment, from: .evidence) { send(ready) }
                }
            }
            if let copySegmenter {
                for segment in copySegmenter.takeClosed().map({ Segment($0) }) {
                    for ready in pairing.add(segment, from: .guidance) { send(ready) }
                }
                if draining { for ready in pairing.drain() { send(ready) } }
            }
            return settings.maxSegments.map { emitted >= $0 } ?? false
        }
        func send(_ segment: Segment) {
            if segment.metadata.partner == nil {
                logger.warning(
                    "pipeline: \(segment.metadata.stream?.rawValue ?? "") segment \(segment.metadata.seq) has no partner",
                    metadata: ["unpaired": "\(pairing.unpaired)"])
            }
            emit(segment)
            if segment.metadata.stream == .evidence { emitted += 1 }
        }
        func closeEarly(_ reason: SegmentEndReason) throws {
            try encoder.flush(into: segmenter)
            try segmenter.close(reason: reason)
            if let guidance, let copySegmenter {
                try guidance.encoder.flush(into: copySegmenter)
                try copySegmenter.close(reason: reason)
            }
        }
        func restartEncoders() throws {
            try encoder.restart()
            try guidance?.encoder.restart()
        }
        defer { source.close() }

        while true {
            if stopRequested() {
                try closeEarly(.shutdown)
                _ = deliver(draining: true)
                return
            }
            if let parked = settings.parked, control.parkRequested() {
                // Continuous recording stops with the segment in progress; the parked watch
                // opens the camera at its own rate, and gives it back when driving resumes.
                try closeEarly(.parked)
                if deliver(draining: true) { return }
                source.close()
                // A parked car's clips are evidence only: nothing is streamed while parked.
                let (nextSeq, ended) = try runParked(
                    parked, firstSeq: segmenter.upcomingSeq,
                    emit: {
                        var clip = $0
                        if guidance != nil { clip.metadata.stream = .evidence }
                        emit(clip)
                    }, control: control)
                if stopRequested() || ended { return }
                try restartEncoders()
                (segmenter, copySegmenter) = segmenters(from: nextSeq)
                logger.notice("driving: continuous recording resumes")
                _ = open(source, stopRequested: stopRequested)
                continue
            }
            let frame: Frame
            do {
                guard let next = try source.nextFrame() else {
                    try closeEarly(.endOfInput)
                    _ = deliver(draining: true)
                    logger.info("source: \(source.name) ended")
                    return
                }
                frame = next
            } catch let error as SourceError where error.isRecoverable {
                logger.error("\(error)")
                events.yield(.lost(reason: "\(error)"))
                try closeEarly(error.isLost ? .cameraLost : .cameraStalled)
                if deliver(draining: true) { return }
                source.close()
                // A flushed encoder takes no more frames, and the reopened camera starts a new timeline.
                try restartEncoders()
                segmenter.restartTimeline()
                copySegmenter?.restartTimeline()
                reopen(source, stopRequested: stopRequested)
                continue
            }
            if guidance == nil { tap?.offer(frame) }
            guard let placement = segmenter.place(frame) else { continue }
            try encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
            // The guidance copy takes the frames of its slower timeline, scaled once for its
            // encoder and the local checks alike; its segments start at the evidence's first frames.
            if let guidance, let copySegmenter,
                let copyPlacement = copySegmenter.place(frame, following: placement.slot, fps: settings.encoder.format.fps)
            {
                let small = try guidance.scaler.scale(frame)
                tap?.offer(small)
                try guidance.encoder.encode(small, slot: copyPlacement.slot, keyframe: copyPlacement.startsSegment, into: copySegmenter)
            }
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
