import FFmpegLog
import HAL
import Logging
import TestSupport
import Testing

/// FFmpeg's own log lines through swift-log: the route (real `av_log`, real encoders) and the
/// rate limit (time passed in).
@Suite(.serialized) struct FFmpegLogTests {
    static let error: Int32 = 16, warning: Int32 = 24, info: Int32 = 32, verbose: Int32 = 40, debug: Int32 = 48

    @Test func aLineLoggedByFFmpegArrivesFormattedWithWhatWroteItAndAMappedLevel() {
        let lines = LogLines()
        FFmpegLog.route(to: lines.logger)
        FFmpegLog.emit(level: Self.warning, item: "probe-item-1", line: "a warning from FFmpeg")
        FFmpegLog.emit(level: Self.error, item: "probe-item-2", line: "an error from FFmpeg")
        FFmpegLog.emit(level: Self.debug, item: "probe-item-3", line: "chatter below the logger's level")
        let mine = lines.entries.filter { $0.metadata["ffmpeg"]?.description.hasPrefix("probe-item") == true }
        #expect(mine.map(\.message) == ["a warning from FFmpeg", "an error from FFmpeg"], "no prefix, no newline, no debug line")
        #expect(mine.map(\.level) == [.warning, .error])
        #expect(mine.map { $0.metadata["ffmpeg"]?.description } == ["probe-item-1", "probe-item-2"])
    }

    @Test func anEncoderThatDoesNotOpenSaysWhyThroughTheLogNamingTheCodec() throws {
        let lines = LogLines()
        FFmpegLog.route(to: lines.logger)
        let settings = EncoderSettings(preference: ["hevc_v4l2m2m"], rateControl: .crf(28),
                                       format: VideoFormat(width: 640, height: 360, fps: 10), keyframeInterval: 50)
        // Without a V4L2 memory-to-memory encoder here, opening it fails and FFmpeg says so.
        if (try? LibavEncoder(settings: settings, inputFormat: .yuv420p)) == nil {
            let fromCodec = lines.entries.filter { $0.metadata["ffmpeg"]?.description == "hevc_v4l2m2m" }
            #expect(!fromCodec.isEmpty, "\(lines.all)")
            #expect(fromCodec.allSatisfy { !$0.message.contains("@ 0x") && !$0.message.hasSuffix("\n") })
        }
    }

    @Test func eachWriterGetsOneLineASecondAndTheNextLineCountsTheRest() {
        var limits = FFmpegLog.Limits()
        let second: UInt64 = 1_000_000_000
        #expect(limits.admit(item: "mov", now: 10 * second) == 0)
        for i in 1...50 { #expect(limits.admit(item: "mov", now: 10 * second + UInt64(i) * 1_000_000) == nil) }
        #expect(limits.admit(item: "hevc", now: 10 * second + 60_000_000) == 0, "another writer has its own second")
        #expect(limits.admit(item: "mov", now: 11 * second) == 50, "the 50 refused are counted on the next line")
        #expect(limits.admit(item: "mov", now: 12 * second) == 0)
    }

    @Test func writersPastTheLimitAreForgottenLeastRecentFirst() {
        var limits = FFmpegLog.Limits()
        let now: UInt64 = 5_000_000_000
        #expect(limits.admit(item: "first", now: now) == 0)
        for i in 0..<FFmpegLog.Limits.maxItems { _ = limits.admit(item: "item-\(i)", now: now) }
        #expect(limits.admit(item: "first", now: now + 1) == 0, "forgotten, so it starts afresh")
        #expect(limits.admit(item: "item-\(FFmpegLog.Limits.maxItems - 1)", now: now + 2) == nil, "still remembered")
    }

    @Test func levelsMapBothWays() {
        #expect([0, 8, 16, 24, 32, 40, 48, 56].map { FFmpegLog.level(ofFFmpeg: $0) } == [.error, .error, .error, .warning, .info, .debug, .trace, .trace])
        for level: Logger.Level in [.trace, .debug, .info, .warning, .error] {
            #expect(FFmpegLog.level(ofFFmpeg: FFmpegLog.ffmpegLevel(for: level)) == level)
        }
        #expect(FFmpegLog.ffmpegLevel(for: .notice) == 32 && FFmpegLog.ffmpegLevel(for: .critical) == 16)
    }
}
