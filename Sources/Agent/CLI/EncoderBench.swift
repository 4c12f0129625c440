import Foundation
import Glibc
public import HAL
import Logging

/// What the board's encoders do at the configured sizes, measured on the board itself (`doctor
/// --encoders`): nothing else can say it, since the hardware encoders are not where the agent is built.
///
/// Each candidate of `encoder.preference` (and `uplink.video.preference`) encodes a few seconds of
/// generated video at its stream's size as fast as it can: whether it opened (and why not), its
/// frames a second, and the process's CPU time per second of video (1.0: one core). Then the first
/// that opens of each runs with the other through the capture pipeline, as `record` runs them: both
/// streams sustain the camera's rate when that pipeline makes frames faster than the camera gives them.
public struct EncoderBench: Sendable {
    public struct Trial: Codable, Sendable, Equatable {
        /// `evidence`, `guidance`, or `recording` with one stream.
        public var stream: String
        public var encoder: String
        public var format: String
        public var opened: Bool
        public var reason: String?
        public var fps: Double?
        /// CPU seconds per second of video: the share of one core real time takes.
        public var cpuCores: Double?
        /// At least the stream's rate.
        public var sustains: Bool?
    }

    public struct Together: Codable, Sendable, Equatable {
        public var evidence: String
        public var guidance: String?
        public var fps: Double
        public var cpuCores: Double
        public var sustains: Bool
        public var droppedFrames: Int
    }

    public struct Report: Codable, Sendable, Equatable {
        public var trials: [Trial]
        public var together: Together?
        public var togetherProblem: String?
    }

    public let config: AgentConfig
    /// Seconds of generated video each encoder is given.
    public var seconds = 3
    public var hardware = EncoderHardware.system

    public init(config: AgentConfig) { self.config = config }

    /// Every candidate, then both streams together. Runs on the calling thread (minutes at most).
    public func run() -> Report {
        var report = Report(trials: trials(of: .evidence) + trials(of: .guidance))
        do {
            report.together = try together()
        } catch {
            report.togetherProblem = "\(error)"
        }
        return report
    }

    /// Each candidate of one stream's preference, alone (none for the guidance copy with one stream).
    public func trials(of stream: SegmentStream) -> [Trial] {
        let twoStreams = config.guidanceEncoderSettings != nil
        guard let settings = stream == .evidence ? config.encoderSettings : config.guidanceEncoderSettings else { return [] }
        return settings.preference.map { name in
            var one = settings
            one.preference = [name]
            return trial(one, stream: stream == .guidance ? "guidance" : twoStreams ? "evidence" : "recording")
        }
    }

    func trial(_ settings: EncoderSettings, stream: String) -> Trial {
        let name = settings.preference[0]
        var trial = Trial(stream: stream, encoder: name, format: "\(settings.format)", opened: false)
        do {
            let source = try Prerendered(format: settings.format, seconds: seconds)
            _ = try source.open()
            let encoder = try LibavEncoder(settings: settings, inputFormat: source.pixelFormat, hardware: hardware)
            trial.opened = true
            let segmenter = Segmenter(format: settings.format, segmentSeconds: max(1, settings.keyframeInterval / settings.format.fps))
            let frames = seconds * settings.format.fps
            let (wall, cpu) = try Self.timed {
                for _ in 0..<frames {
                    guard let frame = try source.nextFrame(), let placement = segmenter.place(frame) else { continue }
                    try encoder.encode(frame, slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
                }
                try encoder.flush(into: segmenter)
                try segmenter.close(reason: .endOfInput)
            }
            trial.fps = Double(frames) / max(wall, 1e-6)
            trial.cpuCores = cpu / Double(seconds)
            trial.sustains = trial.fps! >= Double(settings.format.fps)
        } catch let error as EncoderError {
            trial.reason = error.attempts.first?.reason ?? error.detail
        } catch {
            trial.reason = "\(error)"
        }
        return trial
    }

    /// Both streams through the capture pipeline, one segment's worth of generated frames.
    func together() throws -> Together {
        var settings = config.pipelineSettings(maxSegments: 1)
        settings.track = nil
        var logger = Logger(label: "encoders")
        logger.logLevel = .critical
        let format = config.videoFormat
        let pipeline = try CapturePipeline(
            source: try Prerendered(format: format, seconds: config.encoder.segmentSeconds), settings: settings,
            encoder: { [config, hardware] in
                try AgentConfig.open(config.encoderSettings, inputFormat: $0, role: nil, logger: logger, hardware: hardware)
            },
            guidanceEncoder: { [config, hardware] in
                try AgentConfig.open(
                    config.guidanceEncoderSettings ?? config.encoderSettings, inputFormat: $0, role: nil, logger: logger, hardware: hardware
                )
            }, logger: logger)
        var frames = 0, dropped = 0
        let (wall, cpu) = try Self.timed {
            pipeline.start()
            let done = DispatchSemaphore(value: 0)
            let box = Box()
            Task {
                do {
                    for try await segment in pipeline.segments where segment.metadata.stream != .guidance {
                        box.frames += segment.metadata.frames
                        box.dropped += segment.metadata.droppedFrames
                    }
                } catch {
                    box.error = error
                }
                done.signal()
            }
            done.wait()
            if let error = box.error { throw error }
            frames = box.frames
            dropped = box.dropped
        }
        let videoSeconds = Double(frames) / Double(format.fps)
        let fps = Double(frames) / max(wall, 1e-6)
        return Together(
            evidence: pipeline.encoderName, guidance: pipeline.guidanceEncoderName, fps: fps,
            cpuCores: cpu / max(videoSeconds, 1e-6), sustains: fps >= Double(format.fps), droppedFrames: dropped)
    }

    /// The test pattern drawn once, before the clock starts, and handed out as fast as it is taken
    /// with the times of a camera at the format's rate: what is measured is the encoding, not the
    /// drawing (a camera's frames cost nothing to make).
    final class Prerendered: FrameSource {
        let name = "test-pattern"
        let pixelFormat = PixelFormat.yuv420p
        private let format: VideoFormat
        private let frames: [FrameCopy]
        private let count: Int
        private var index = 0
        private var start: UInt64 = 0

        init(format: VideoFormat, seconds: Int) throws {
            let pattern = TestPatternSource(format: format, realtime: false)
            _ = try pattern.open()
            var frames: [FrameCopy] = []
            // A few distinct pictures, so the encoder sees motion; repeated after that.
            for _ in 0..<min(format.fps, 6) {
                guard let frame = try pattern.nextFrame(), let copy = FrameCopy(frame) else { break }
                frames.append(copy)
            }
            self.format = format
            self.frames = frames
            count = seconds * format.fps
        }

        func open() throws -> VideoFormat {
            index = 0
            start = MonotonicClock.now()
            return format
        }

        func nextFrame() throws -> Frame? {
            guard index < count, !frames.isEmpty else { return nil }
            var frame = frames[index % frames.count].frame
            frame.timestamp = start + UInt64(index) * 1_000_000_000 / UInt64(format.fps)
            frame.sequence = UInt64(index)
            index += 1
            return frame
        }

        func close() {}
    }

    private final class Box: @unchecked Sendable {
        var frames = 0, dropped = 0
        var error: (any Error)?
    }

    /// Wall seconds and the process's CPU seconds (every thread: encoders run their own) of `body`.
    static func timed(_ body: () throws -> Void) throws -> (wall: Double, cpu: Double) {
        func cpuNow() -> Double {
            var usage = rusage()
            getrusage(RUSAGE_SELF.rawValue, &usage)
            return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        }
        let wall0 = MonotonicClock.now(), cpu0 = cpuNow()
        try body()
        return (Double(MonotonicClock.now() - wall0) / 1e9, cpuNow() - cpu0)
    }

    /// The report for people: one line a candidate, then both streams.
    public static func text(_ report: Report, cameraFPS: Int) -> [String] {
        var lines: [String] = []
        for trial in report.trials {
            guard trial.opened, let fps = trial.fps, let cpu = trial.cpuCores else {
                lines.append("  \(trial.stream) \(trial.encoder) at \(trial.format): does not open (\(trial.reason ?? "?"))")
                continue
            }
            lines.append(
                String(
                    format: "  %@ %@ at %@: %.0f frames/s, %.2f of a core for real time; %@", trial.stream, trial.encoder,
                    trial.format, fps, cpu, trial.sustains == true ? "sustains it" : "too slow for it"))
        }
        if let both = report.together {
            lines.append(
                String(
                    format: "  both streams (%@ + %@): %.0f frames/s of the camera's %d, %.2f of a core; %@", both.evidence,
                    both.guidance ?? "none", both.fps, cameraFPS, both.cpuCores,
                    both.sustains ? "sustained" : "NOT sustained: lower camera.width/height or fps, or use a hardware encoder"))
        } else if let problem = report.togetherProblem {
            lines.append("  both streams: \(problem)")
        }
        return lines
    }
}
