@testable import Agent
import Foundation
import HAL
import Logging
import TestSupport
import Testing

/// One capture, two encodes: libx264 evidence at the camera's size and rate, a libx265 copy at a
/// quarter of the size and a third of the rate, through the real encoders; checked with ffprobe.
@Suite struct TwoStreamPipelineTests {
    let evidence = VideoFormat(width: 320, height: 192, fps: 30)
    let guidance = VideoFormat(width: 160, height: 96, fps: 10)

    func settings(maxSegments: Int?) -> CapturePipeline.Settings {
        var settings = CapturePipeline.Settings(
            encoder: EncoderSettings(
                preference: ["libx264"], rateControl: .crf(23), format: evidence, keyframeInterval: 30,
                codecs: [.hevc, .h264]),
            segmentSeconds: 1, reopenBackoffMs: (1, 4), maxSegments: maxSegments)
        settings.guidance = EncoderSettings(preference: ["libx265"], rateControl: .crf(28), format: guidance, keyframeInterval: 10)
        return settings
    }

    func run(_ source: any FrameSource, maxSegments: Int?) async throws -> [Segment] {
        let settings = settings(maxSegments: maxSegments)
        let pipeline = try CapturePipeline(
            source: source, settings: settings,
            encoder: { try LibavEncoder(settings: settings.encoder, inputFormat: $0) },
            guidanceEncoder: { try LibavEncoder(settings: settings.guidance!, inputFormat: $0) }, logger: Logger(label: "test"))
        #expect(pipeline.encoderName == "libx264")
        #expect(pipeline.guidanceEncoderName == "libx265")
        pipeline.start()
        var segments: [Segment] = []
        for try await segment in pipeline.segments { segments.append(segment) }
        return segments
    }

    func probe(_ segment: Segment) throws -> ProbedSegment {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("two-\(UUID().uuidString).mp4")
        try Data(segment.data).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        return try FFprobe.probe(file)
    }

    @Test func eachEvidenceSegmentHasAGuidancePartnerFromTheSameFrame() async throws {
        let segments = try await run(TestPatternSource(format: evidence, realtime: false), maxSegments: 3)
        #expect(segments.map(\.metadata.stream) == [.guidance, .evidence, .guidance, .evidence, .guidance, .evidence])
        for pair in stride(from: 0, to: segments.count, by: 2) {
            let copy = segments[pair].metadata, full = segments[pair + 1].metadata
            #expect(copy.seq == full.seq && full.seq == pair / 2)
            #expect(copy.capturedAt == full.capturedAt)
            #expect(copy.captureStartMonotonicNs == full.captureStartMonotonicNs)
            #expect(full.partner?.stream == .guidance && full.partner?.sha256 == copy.sha256 && full.partner?.bytes == copy.bytes)
            #expect(copy.partner?.stream == .evidence && copy.partner?.sha256 == full.sha256 && copy.partner?.seq == full.seq)
            #expect((full.codec, full.encoder, full.width, full.fps, full.frames) == (.h264, "libx264", 320, 30, 30))
            #expect((copy.codec, copy.encoder, copy.width, copy.fps, copy.frames) == (.hevc, "libx265", 160, 10, 10))

            let probedFull = try probe(segments[pair + 1]), probedCopy = try probe(segments[pair])
            #expect((probedFull.codec, probedFull.tag, probedFull.frames) == ("h264", "avc1", 30))
            #expect((probedCopy.codec, probedCopy.tag, probedCopy.frames) == ("hevc", "hvc1", 10))
            for probed in [probedFull, probedCopy] {
                #expect(probed.startsWithIDR && probed.keyframeCount == 1 && probed.moovBeforeMdat, "\(probed)")
                #expect(abs(probed.duration - 1.0) <= 0.05, "\(probed.duration)")
            }
        }
    }

    @Test func aLostCameraClosesBothStreamsAtTheSamePointAndTheyStayPaired() async throws {
        // 45 frames (a segment and a half), lost, then 30 more: both streams close early together.
        let camera = UnpluggedCamera(format: evidence, framesBeforeLoss: 45, framesAfterReturn: 30)
        let segments = try await run(camera, maxSegments: nil)
        let full = segments.filter { $0.metadata.stream == .evidence }.map(\.metadata)
        let copies = segments.filter { $0.metadata.stream == .guidance }.map(\.metadata)
        #expect(full.map(\.frames) == [30, 15, 30])
        #expect(copies.map(\.frames) == [10, 5, 10])
        #expect(full.map(\.endReason) == [.complete, .cameraLost, .complete])
        #expect(copies.map(\.endReason) == [.complete, .cameraLost, .complete])
        #expect(full.map(\.seq) == copies.map(\.seq))
        #expect(full.map(\.captureStartMonotonicNs) == copies.map(\.captureStartMonotonicNs))
        #expect(segments.allSatisfy { $0.metadata.partner != nil })
    }
}

/// The pairing rules without encoders: order, numbering, and segments whose partner never comes.
@Suite struct SegmentPairingTests {
    func segment(seq: Int, start: UInt64, bytes: Int, _ stream: SegmentStream) -> Segment {
        Segment(
            metadata: SegmentMetadata(
                seq: seq, capturedAt: Date(timeIntervalSince1970: Double(start) / 1e9 + (stream == .evidence ? 0 : 0.5)),
                captureStartMonotonicNs: start, durationMs: 5000, frames: 50, droppedFrames: 0, bytes: bytes,
                sha256: "\(stream)-\(seq)", encoder: "x", width: 1, height: 1, fps: 10, complete: true, endReason: .complete),
            data: [])
    }

    @Test func aPairComesOutGuidanceFirstNumberedAndDatedAsTheEvidence() {
        var pairing = SegmentPairing()
        #expect(pairing.add(segment(seq: 7, start: 5_000, bytes: 10, .guidance), from: .guidance).isEmpty)
        let out = pairing.add(segment(seq: 4, start: 5_000, bytes: 99, .evidence), from: .evidence)
        #expect(out.map(\.metadata.stream) == [.guidance, .evidence])
        #expect(out.map(\.metadata.seq) == [4, 4])
        #expect(out[0].metadata.capturedAt == out[1].metadata.capturedAt)
        #expect(out[1].metadata.partner?.sha256 == "guidance-7" && out[0].metadata.partner?.bytes == 99)
        #expect(pairing.unpaired == 0)
    }

    @Test func aSegmentWhosePartnerCannotComeGoesAlone() {
        var pairing = SegmentPairing()
        #expect(pairing.add(segment(seq: 0, start: 0, bytes: 1, .evidence), from: .evidence).isEmpty)
        // The guidance copy's first segment starts later: the evidence segment 0 has no partner.
        let out = pairing.add(segment(seq: 1, start: 5_000, bytes: 1, .guidance), from: .guidance)
        #expect(out.map(\.metadata.seq) == [0])
        #expect(out[0].metadata.partner == nil)
        #expect(pairing.unpaired == 1)
        #expect(pairing.drain().map(\.metadata.stream) == [.guidance])
    }

    @Test func atMostThreeWaitForAPartner() {
        var pairing = SegmentPairing()
        var out: [Segment] = []
        for n in 0..<5 { out += pairing.add(segment(seq: n, start: UInt64(n) * 5_000, bytes: 1, .evidence), from: .evidence) }
        #expect(out.map(\.metadata.seq) == [0, 1])
        #expect(pairing.drain().map(\.metadata.seq) == [2, 3, 4])
    }
}

/// `doctor --encoders`: each candidate tried, absent hardware named, both streams run together.
@Suite struct EncoderBenchTests {
    @Test func everyCandidateIsTriedAndBothStreamsRunTogether() async throws {
        var config = AgentConfig()
        config.camera.width = 320
        config.camera.height = 192
        config.camera.fps = 10
        config.encoder.segmentSeconds = 1
        config.encoder.preference = ["h264_vaapi", "mpeg4", "libx264"]
        config.uplink.video.width = 160
        config.uplink.video.height = 96
        config.uplink.video.fps = 5
        var bench = EncoderBench(config: config)
        bench.seconds = 1
        bench.hardware = EncoderHardware(sysfs: "/nonexistent", dev: "/nonexistent") { _, _ in nil }
        let report = bench.run()
        #expect(
            report.trials.map { "\($0.stream) \($0.encoder)" } == [
                "evidence h264_vaapi", "evidence mpeg4", "evidence libx264", "guidance libx265"
            ])
        #expect(report.trials[0].opened == false && report.trials[0].reason?.hasPrefix("no VAAPI device") == true)
        #expect(report.trials[1].reason == "not an HEVC or H.264 encoder")
        for trial in report.trials.suffix(2) {
            #expect(trial.opened && (trial.fps ?? 0) > 0 && (trial.cpuCores ?? -1) >= 0 && trial.sustains != nil, "\(trial)")
        }
        #expect(report.trials[2].format == "320x192@10" && report.trials[3].format == "160x96@5")
        let together = try #require(report.together, "\(report.togetherProblem ?? "")")
        #expect(together.evidence == "libx264" && together.guidance == "libx265")
        #expect(together.fps > 0 && together.droppedFrames == 0)
        let text = EncoderBench.text(report, cameraFPS: 10)
        #expect(text.first?.contains("h264_vaapi at 320x192@10: does not open (no VAAPI device") == true, "\(text)")
        #expect(text.last?.hasPrefix("  both streams (libx264 + libx265)") == true, "\(text)")
    }
}

/// `status` with two streams: each one's encoder and size, its data an hour, and the hours of
/// evidence the recording folder holds at that rate.
@Suite struct StreamStatusTests {
    func segment(bytes: Int, stream: SegmentStream, codec: VideoCodec) -> SegmentMetadata {
        var metadata = SegmentMetadata(
            seq: 0, capturedAt: Date(), captureStartMonotonicNs: 0, durationMs: 5000, frames: 150, droppedFrames: 0, bytes: bytes,
            sha256: "", encoder: "x", width: 1, height: 1, fps: 30, complete: true, endReason: .complete)
        metadata.stream = stream
        metadata.codec = codec
        return metadata
    }

    @Test func bothStreamsAreShownWithTheirRateAndTheHoursTheFolderHolds() throws {
        let board = StatusBoard(
            AgentStatus(
                camera: .init(source: "cam", format: "1920x1080@30", fps: 30, state: "recording"), encoder: "libx264",
                speech: .init(output: "alsa", locale: "en-US"), haptics: .init(line: "none", released: false)))
        board.update {
            $0.streams = .init(
                evidence: .init(encoder: "libx264", format: "1920x1080@30"),
                guidance: .init(encoder: "libx265", format: "640x360@10"))
        }
        // 5 s of evidence in 2.5 MiB: 1800 MiB an hour; a 9000 MiB cap holds 5 hours.
        board.recorded(segment(bytes: 2_621_440, stream: .evidence, codec: .h264), capBytes: 9000 << 20)
        board.streamed(segment(bytes: 62_500, stream: .guidance, codec: .hevc))
        let status = board.current
        let streams = try #require(status.streams)
        #expect(streams.evidence.megabytesPerHour == 1800 && streams.recordingHours == 5)
        #expect(streams.guidance.segments == 1 && streams.guidance.codec == "hevc")
        let text = status.text
        #expect(
            text.contains(
                "evidence: libx264 (h264) at 1920x1080@30; 1 segments, 1800 MB an hour (4194 kbit/s); the recording folder holds 5.0 hours"),
            "\(text)")
        #expect(text.contains("guidance: libx265 (hevc) at 640x360@10; 1 segments, 43 MB an hour (100 kbit/s)"), "\(text)")
    }
}
