public import HAL
import Logging

/// How a parked car is watched: the camera at a low rate, the motion detector on every frame,
/// and the last seconds held in memory, so a clip starts before what triggered it.
public struct ParkedCapture: Sendable {
    /// Frames a second while parked (`parking.fps`): the clips' rate.
    public var fps: Int
    /// The camera as it runs while parked, at ``fps``.
    public var makeSource: @Sendable () -> any FrameSource
    /// The encoder of one clip, for frames of this format and layout: one keyframe a clip
    /// (``ParkedClipRules/Settings/clipSegmentSeconds``), as a segment has one.
    public var makeEncoder: @Sendable (_ format: VideoFormat, _ input: PixelFormat) throws -> any VideoEncoder
    public var watch: ParkedClipRules.Settings
    /// Nil: motion is not watched (`parking.sensitivity: off`); impacts still are.
    public var motion: MotionDetector.Settings?

    public init(
        fps: Int, makeSource: @escaping @Sendable () -> any FrameSource,
        makeEncoder: @escaping @Sendable (_ format: VideoFormat, _ input: PixelFormat) throws -> any VideoEncoder,
        watch: ParkedClipRules.Settings, motion: MotionDetector.Settings?
    ) {
        self.fps = fps
        self.makeSource = makeSource
        self.makeEncoder = makeEncoder
        self.watch = watch
        self.motion = motion
    }
}

extension CaptureLoop {
    /// One clip being encoded: its own encoder and segmenter at the parked rate.
    private struct Clip {
        let encoder: any VideoEncoder
        let segmenter: Segmenter
        let trigger: ParkedClipRules.Trigger
        let triggerTime: UInt64
    }

    /// The parked car's loop, on the capture thread: returns when driving resumes or a stop is
    /// asked for (a clip in progress is closed and emitted first), with the next segment number,
    /// and whether the source ended (a file).
    func runParked(_ parked: ParkedCapture, firstSeq: Int, emit: (Segment) -> Void, control: Control) throws -> (nextSeq: Int, ended: Bool)
    {
        let source = parked.makeSource()
        var seq = firstSeq
        defer { source.close() }
        let stayParked = { !control.stopRequested() && control.parkRequested() }
        guard open(source, stopRequested: { !stayParked() }) else { return (seq, false) }
        let format = VideoFormat(width: settings.encoder.format.width, height: settings.encoder.format.height, fps: parked.fps)
        logger.notice("parked: continuous recording and streaming stopped; watching \(source.name) for motion and impacts")
        var watch = ParkedClipRules(settings: parked.watch)
        var motion = parked.motion.map(MotionDetector.init(settings:))
        var preRoll: [FrameCopy] = []
        /// Twice the frames the pre-roll should hold at the parked rate, and one more.
        let maxHeld = 2 * parked.fps * Int(parked.watch.preRollNs / 1_000_000_000) + 1
        var clip: Clip?
        var ended = false

        func encode(_ frame: Frame, into clip: Clip) throws {
            guard let placement = clip.segmenter.place(frame) else { return }
            try clip.encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: clip.segmenter)
        }
        func finish(_ ending: Clip) throws {
            try ending.encoder.flush(into: ending.segmenter)
            try ending.segmenter.close(reason: .parked)
            for var segment in ending.segmenter.takeClosed().map(settings.noted) {
                let offset =
                    ending.triggerTime >= segment.metadata.captureStartMonotonicNs
                    ? Int((ending.triggerTime - segment.metadata.captureStartMonotonicNs) / 1_000_000) : 0
                segment.notes.parking = SegmentParkingEvent(trigger: ending.trigger.rawValue, triggerOffsetMs: offset)
                logger.notice(
                    "parked: \(ending.trigger.rawValue) clip \(segment.metadata.seq) saved",
                    metadata: ["durationMs": "\(segment.metadata.durationMs)", "preRollMs": "\(offset)"])
                emit(segment)
            }
            seq = ending.segmenter.upcomingSeq
        }

        while stayParked() {
            let frame: Frame
            do {
                guard let next = try source.nextFrame() else {
                    logger.info("source: \(source.name) ended")
                    ended = true
                    break
                }
                frame = next
            } catch let error as SourceError where error.isRecoverable {
                logger.error("\(error)")
                if let ending = clip { try finish(ending) }
                clip = nil
                _ = watch.cut()
                preRoll = []
                motion = parked.motion.map(MotionDetector.init(settings:))
                source.close()
                reopen(source, stopRequested: { !stayParked() })
                continue
            }
            health.parkedFrame()
            control.frameWatched()
            let moved = frame.luma(maxWidth: 160).map { motion?.look($0) ?? false } ?? false
            let trigger: ParkedClipRules.Trigger? = control.takeImpacts() > 0 ? .impact : moved ? .motion : nil
            switch watch.frame(at: frame.timestamp, trigger: trigger, preRollStart: preRoll.first?.frame.timestamp ?? frame.timestamp) {
            case .hold(let dropBefore):
                preRoll.removeAll { $0.frame.timestamp < dropBefore }
                if let copy = FrameCopy(frame) { preRoll.append(copy) }
                // Bounded by count too: a camera whose times stand still must not fill the memory.
                if preRoll.count > maxHeld { preRoll.removeFirst(preRoll.count - maxHeld) }
            case .start(let trigger):
                logger.notice("parked: \(trigger.rawValue); recording a clip with \(preRoll.count) frames before it")
                let segmentSeconds = parked.watch.clipSegmentSeconds
                let started = Clip(
                    encoder: try parked.makeEncoder(format, source.pixelFormat),
                    segmenter: Segmenter(
                        format: format, segmentSeconds: segmentSeconds, firstSeq: seq,
                        locate: settings.location),
                    trigger: trigger, triggerTime: frame.timestamp)
                for held in preRoll { try encode(held.frame, into: started) }
                preRoll = []
                try encode(frame, into: started)
                clip = started
                control.clipStarted()
            case .record:
                if let clip { try encode(frame, into: clip) }
            case .end:
                if let ending = clip {
                    try encode(frame, into: ending)
                    try finish(ending)
                }
                clip = nil
            }
        }
        if let ending = clip { try finish(ending) }
        return (seq, ended)
    }
}
