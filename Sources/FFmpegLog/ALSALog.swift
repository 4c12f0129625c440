import CALSALog
import Dispatch
import GuidanceProtocol
public import Logging
import Synchronization

/// alsa-lib's own messages ("Unknown PCM default", "cannot find card '0'") through swift-log, like
/// FFmpeg's (``FFmpegLog``), instead of raw `ALSA lib …` lines on standard error: each at `error`
/// with the function that wrote it (metadata `alsa`), at most one a second from each function.
public enum ALSALog {
    /// Sends alsa-lib's messages to a logger labelled `alsa` from now on, at `level` (nil: the
    /// logging system's level).
    public static func route(level: Logger.Level? = nil) {
        var logger = Logger(label: "alsa")
        if let level { logger.logLevel = level }
        route(to: logger)
    }

    public static func route(to logger: Logger) {
        router.withLock { $0 = FFmpegLog.Router(logger: logger) }
        alsa_log_route { function, err, line in
            guard let line else { return }
            ALSALog.log(function: function.map { String(cString: $0) } ?? "", line: String(cString: line))
        }
    }

    private static let router = Mutex<FFmpegLog.Router?>(nil)

    static func log(function: String, line: String) {
        let now = DispatchTime.now().uptimeNanoseconds
        let (logger, suppressed) = router.withLock { router in
            (router?.logger, router?.limits.admit(function, now: now))
        }
        guard let logger, let suppressed else { return }
        var metadata: Logger.Metadata = ["alsa": .string(function.isEmpty ? "-" : function)]
        if suppressed > 0 { metadata["suppressed"] = .stringConvertible(suppressed) }
        logger.error("\(line)", metadata: metadata)
    }

    /// Opens the playback PCM `name` and closes it: alsa-lib reports why it cannot (for tests).
    /// Returns 0 or alsa-lib's negative error.
    public static func tryPlayback(_ name: String) -> Int32 { alsa_log_try_pcm(name) }
}
