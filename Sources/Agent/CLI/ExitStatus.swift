import ArgumentParser
import Foundation
import ConfigSupport
import HAL

/// One exit status per kind of failure, so scripts and the service manager can tell them apart.
public enum ExitStatus {
    /// `EX_CONFIG`: a config key, value or file is wrong.
    public static let config: Int32 = 78
    /// `EX_NOINPUT`: the camera device or video file does not exist.
    public static let noInput: Int32 = 66
    /// `EX_UNAVAILABLE`: the path exists but is not a usable capture device or video.
    public static let notACamera: Int32 = 69
    /// `EX_SOFTWARE`: no HEVC encoder opens on this machine.
    public static let noEncoder: Int32 = 70
    /// `EX_CANTCREAT`: the recording folder cannot be written.
    public static let output: Int32 = 73
    /// `EX_TEMPFAIL`: the vibration motor's GPIO line is held by another program.
    public static let busy: Int32 = 75
    /// `EX_IOERR`: anything else that stopped the pipeline.
    public static let failure: Int32 = 74

    /// Prints the one-line reason and returns the matching exit code.
    static func report(_ error: any Error) -> ExitCode {
        let code: Int32 = switch error {
        case is ConfigError, is TokenFileError: config
        case let error as SourceError where error.isNotFound: noInput
        case is SourceError: notACamera
        case let error as EncoderError where !error.attempts.isEmpty: noEncoder
        case is OutputError: output
        case let error as HapticsError where error.isNotFound: noInput
        case let error as HapticsError where error.isBusy: busy
        case is HapticsError: notACamera
        default: failure
        }
        var standardError = StandardError()
        print("dashcam-agent: \(error)", to: &standardError)
        return ExitCode(code)
    }
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        FileHandle.standardError.write(Data(string.utf8))
    }
}
