import ArgumentParser
import Foundation
import ConfigSupport
import HAL

/// One exit status per kind of failure, so scripts and the service manager can tell them apart.
public enum ExitStatus {
    /// `EX_CONFIG`: a config key, value or file is wrong.
    public static let config: Int32 = 78
    /// `EX_NOINPUT`: the camera device, video file, GPIO chip or GPIO line does not exist. Like a
    /// camera, a chip whose driver comes up late is there on a later start.
    public static let noInput: Int32 = 66
    /// `EX_UNAVAILABLE`: the path exists but is not a usable capture device or video, or not a
    /// GPIO chip.
    public static let unusable: Int32 = 69
    /// `EX_SOFTWARE`: no HEVC encoder opens on this machine.
    public static let noEncoder: Int32 = 70
    /// `EX_CANTCREAT`: the recording folder cannot be written.
    public static let output: Int32 = 73
    /// `EX_TEMPFAIL`: the vibration motor's GPIO line is held by another program. Temporary, not
    /// `EX_UNAVAILABLE`: the line is there and works, and is free once its holder (a `gpioset`
    /// left running, the previous agent still letting go) ends, so a restart can succeed
    /// without any change.
    public static let busy: Int32 = 75
    /// `EX_NOPERM`: this user may not open the GPIO chip or request the line.
    public static let noPermission: Int32 = 77
    /// `EX_IOERR`: anything else that stopped the pipeline.
    public static let failure: Int32 = 74

    /// Prints the one-line reason and returns the matching exit code.
    static func report(_ error: any Error) -> ExitCode {
        let code: Int32 =
            switch error {
            case is ConfigError, is TokenFileError: config
            case let error as SourceError where error.isNotFound: noInput
            case is SourceError: unusable
            case let error as EncoderError where !error.attempts.isEmpty: noEncoder
            case is OutputError: output
            case let error as GPIOError: status(of: error)
            default: failure
            }
        var standardError = StandardError()
        print("dashcam-agent: \(error)", to: &standardError)
        return ExitCode(code)
    }

    static func status(of error: GPIOError) -> Int32 {
        if error.isNotFound { return noInput }
        if error.isNotAChip { return unusable }
        if error.isBusy { return busy }
        if error.isPermissionDenied { return noPermission }
        // Only a config can ask for a line that names nothing.
        if error.isInvalidRequest { return config }
        return failure
    }
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        FileHandle.standardError.write(Data(string.utf8))
    }
}
