import Foundation
@testable import FFmpegLog
import GuidanceProtocol
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
        let settings = EncoderSettings(
            preference: ["hevc_v4l2m2m"], rateControl: .crf(28),
            format: VideoFormat(width: 640, height: 360, fps: 10), keyframeInterval: 50)
        // sysfs made to list a memory-to-memory HEVC encoder that is not there: FFmpeg is asked,
        // fails to find one, and says so.
        let claimed = EncoderHardware(sysfs: "/nonexistent", dev: "/dev") { node, name in
            .init(node: node, name: name, memoryToMemory: true, makes: [.hevc])
        }
        #expect(claimed.missing(for: "hevc_v4l2m2m", codec: .hevc) != nil, "no sysfs, no devices")
        let listing = FileManager.default.temporaryDirectory.appendingPathComponent("sysfs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: listing) }
        try FileManager.default.createDirectory(
            at: listing.appendingPathComponent("class/video4linux/video99"), withIntermediateDirectories: true)
        let hardware = EncoderHardware(sysfs: listing.path, dev: "/dev", askVideoDevice: claimed.askVideoDevice)
        #expect(hardware.missing(for: "hevc_v4l2m2m", codec: .hevc) == nil)
        if (try? LibavEncoder(settings: settings, inputFormat: .yuv420p, hardware: hardware)) == nil {
            let fromCodec = lines.entries.filter { $0.metadata["ffmpeg"]?.description == "hevc_v4l2m2m" }
            #expect(!fromCodec.isEmpty, "\(lines.all)")
            #expect(fromCodec.allSatisfy { !$0.message.contains("@ 0x") && !$0.message.hasSuffix("\n") })
        }
    }

    @Test func anEncoderWhoseHardwareIsAbsentIsPassedOverWithoutAWordFromFFmpeg() throws {
        let lines = LogLines()
        FFmpegLog.route(to: lines.logger)
        let settings = EncoderSettings(
            preference: ["hevc_v4l2m2m", "hevc_vaapi", "hevc_nvenc", "libx265"], rateControl: .crf(28),
            format: VideoFormat(width: 320, height: 180, fps: 10), keyframeInterval: 50)
        let bare = EncoderHardware(sysfs: "/nonexistent", dev: "/nonexistent") { _, _ in nil }
        let encoder = try LibavEncoder(settings: settings, inputFormat: .yuv420p, hardware: bare)
        #expect(encoder.name == "libx265" && encoder.skipped.count == 3)
        let hardwareLines = lines.entries.filter {
            ["hevc_v4l2m2m", "hevc_vaapi", "hevc_nvenc"].contains($0.metadata["ffmpeg"]?.description ?? "")
        }
        #expect(hardwareLines.isEmpty, "\(lines.all)")
    }

    @Test func alsaLibsMessagesGoThroughTheLogWithTheFunctionThatWroteThem() {
        let lines = LogLines()
        ALSALog.route(to: lines.logger)
        defer { ALSALog.route(to: Logger(label: "alsa")) }
        // An unknown PCM name: alsa-lib reports it (before the route, as "ALSA lib pcm.c:…" on stderr).
        #expect(ALSALog.tryPlayback("no_such_pcm_here") < 0)
        let mine = lines.entries.filter { $0.metadata["alsa"] != nil }
        #expect(mine.contains { $0.message.contains("no_such_pcm_here") && $0.level == .error }, "\(lines.all)")
        #expect(mine.allSatisfy { !$0.message.hasPrefix("ALSA lib") && !$0.message.hasSuffix("\n") })
    }

    @Test func eachWriterGetsOneLineASecondAndTheNextLineCountsTheRest() {
        var limits = FFmpegLog.limits()
        let second: UInt64 = 1_000_000_000
        #expect(limits.admit("mov", now: 10 * second) == 0)
        for i in 1...50 { #expect(limits.admit("mov", now: 10 * second + UInt64(i) * 1_000_000) == nil) }
        #expect(limits.admit("hevc", now: 10 * second + 60_000_000) == 0, "another writer has its own second")
        #expect(limits.admit("mov", now: 11 * second) == 50, "the 50 refused are counted on the next line")
        #expect(limits.admit("mov", now: 12 * second) == 0)
    }

    @Test func writersPastTheLimitAreForgottenLeastRecentFirst() {
        var limits = FFmpegLog.limits()
        let now: UInt64 = 5_000_000_000
        #expect(limits.admit("first", now: now) == 0)
        for i in 0..<limits.maxKeys { _ = limits.admit("item-\(i)", now: now) }
        #expect(limits.admit("first", now: now + 1) == 0, "forgotten, so it starts afresh")
        #expect(limits.admit("item-\(limits.maxKeys - 1)", now: now + 2) == nil, "still remembered")
    }

    @Test func levelsMapBothWays() {
        #expect(
            [0, 8, 16, 24, 32, 40, 48, 56].map { FFmpegLog.level(ofFFmpeg: $0) } == [
                .error, .error, .error, .warning, .info, .debug, .trace, .trace
            ])
        for level: Logger.Level in [.trace, .debug, .info, .warning, .error] {
            #expect(FFmpegLog.level(ofFFmpeg: FFmpegLog.ffmpegLevel(for: level)) == level)
        }
        #expect(FFmpegLog.ffmpegLevel(for: .notice) == 32 && FFmpegLog.ffmpegLevel(for: .critical) == 16)
    }
}
