import CFFmpegLog
import Dispatch
import GuidanceProtocol
public import Logging
import Synchronization

/// FFmpeg's own log lines (libavcodec, libavformat: "Could not find a valid device", "moov atom
/// not found") through swift-log, in the process's log format and at its level, instead of raw on
/// standard error. Each is logged with the codec or format that wrote it (metadata `ffmpeg`), at
/// the mapped level (``level(ofFFmpeg:)``), and at most one line per second from each of them:
/// the rest are counted and the count goes with the next line that passes.
public enum FFmpegLog {
    /// Sends FFmpeg's lines to a logger labelled `ffmpeg` from now on, at `level` (nil: the
    /// logging system's level).
    public static func route(level: Logger.Level? = nil) {
        var logger = Logger(label: "ffmpeg")
        if let level { logger.logLevel = level }
        route(to: logger)
    }

    /// Sends FFmpeg's lines to `logger` from now on, for the whole process. Lines below
    /// `logger`'s level are dropped by FFmpeg before they are formatted.
    public static func route(to logger: Logger) {
        router.withLock { $0 = Router(logger: logger) }
        ffmpeg_log_route(
            { level, item, line in
                guard let line else { return }
                FFmpegLog.log(level: level, item: item.map { String(cString: $0) } ?? "", line: String(cString: line))
            }, ffmpegLevel(for: logger.logLevel))
    }

    /// `Logger.Level` for an `AV_LOG_*` level: panic, fatal and error are errors; warnings
    /// warnings; info info; verbose debug; debug and trace trace.
    public static func level(ofFFmpeg level: Int32) -> Logger.Level {
        switch level {
        case ...16: .error
        case ...24: .warning
        case ...32: .info
        case ...40: .debug
        default: .trace
        }
    }

    /// The most verbose `AV_LOG_*` level that `level` shows.
    public static func ffmpegLevel(for level: Logger.Level) -> Int32 {
        switch level {
        case .trace: 56
        case .debug: 40
        case .info, .notice: 32
        case .warning: 24
        case .error, .critical: 16
        }
    }

    /// Which lines pass: one a second from each item (an FFmpeg or alsa-lib writer), with the
    /// count of those refused; the 64 most recent items remembered.
    static func limits() -> RateLimits<String> { RateLimits(interval: .seconds(1), maxKeys: 64) }

    struct Router {
        var logger: Logger
        var limits = FFmpegLog.limits()
    }

    private static let router = Mutex<Router?>(nil)

    static func log(level: Int32, item: String, line: String) {
        // CLOCK_MONOTONIC, as the server's other rate limits read it.
        let now = DispatchTime.now().uptimeNanoseconds
        let (logger, suppressed) = router.withLock { router in
            (router?.logger, router?.limits.admit(item, now: now))
        }
        guard let logger, let suppressed else { return }
        var metadata: Logger.Metadata = ["ffmpeg": .string(item.isEmpty ? "-" : item)]
        if suppressed > 0 { metadata["suppressed"] = .stringConvertible(suppressed) }
        logger.log(level: Self.level(ofFFmpeg: level), "\(line)", metadata: metadata)
    }

    /// Logs `line` through FFmpeg's `av_log` as if `item` had, at `level` (for tests).
    public static func emit(level: Int32, item: String, line: String) {
        ffmpeg_log_emit(level, item, line)
    }
}
