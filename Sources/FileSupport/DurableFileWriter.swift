import Glibc

/// Writes a file so that it is either whole on the disk or not there: the bytes go to a
/// temporary file beside it, which is flushed, closed and renamed over the file, and the
/// folder is flushed so the rename itself survives a power cut. A reader meanwhile sees the
/// old file or the new one, never half.
///
/// The recording's segments, the configuration files `setup` and `token` write, and the speech
/// WAV files all go through ``write(_:to:temporary:mode:exactMode:owner:)``.
///
/// - Important: The temporary file is always made new (`O_EXCL | O_NOFOLLOW`): a file or a
///   symbolic link left under its name is deleted first, never written through.
public enum DurableFileWriter {
    /// The step of a write that failed, and why; the temporary file is gone by then.
    public struct WriteError: Error, CustomStringConvertible {
        public enum Step: Sendable, Equatable {
            /// Creating the temporary file (``WriteError/path`` is the temporary file).
            case create
            /// Setting the exact mode asked for.
            case setMode
            /// Giving the file the owner asked for.
            case setOwner
            /// Writing, flushing or closing the temporary file.
            case write
            /// Renaming the temporary file over the file.
            case rename
        }

        public let step: Step
        /// The file the step was about: the temporary file for ``Step/create``, `write`'s
        /// destination otherwise.
        public let path: String
        public let temporaryPath: String
        /// `errno` of the failing call, or nil when the disk took fewer bytes without saying why.
        public let code: Int32?
        /// What went wrong, in a few words: `strerror`, or how many bytes the disk took.
        public let reason: String

        public var description: String { "cannot write \(path): \(reason)" }
    }

    /// Replaces `path` with `bytes`, through the temporary file `temporary` in the same folder.
    ///
    /// - Parameters:
    ///   - mode: The new file's mode; the umask applies unless `exactMode`.
    ///   - owner: A user and group to give the file (`fchown`), or nil to keep the writer's.
    public static func write(
        _ bytes: [UInt8], to path: String, temporary: String,
        mode: Int = 0o644, exactMode: Bool = false, owner: (user: UInt32, group: UInt32)? = nil
    ) throws(WriteError) {
        let flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC
        var fd = open(temporary, flags, mode_t(mode))
        if fd < 0 && errno == EEXIST, unlink(temporary) == 0 {
            fd = open(temporary, flags, mode_t(mode))
        }
        guard fd >= 0 else {
            throw WriteError(step: .create, path: temporary, temporaryPath: temporary, code: errno, reason: text(errno))
        }
        func failure(_ step: WriteError.Step, code: Int32?, reason: String? = nil) -> WriteError {
            WriteError(step: step, path: path, temporaryPath: temporary, code: code, reason: reason ?? code.map(text) ?? "")
        }
        var failed: WriteError?
        if exactMode, fchmod(fd, mode_t(mode)) != 0 {
            failed = failure(.setMode, code: errno)
        }
        if failed == nil, let owner, fchown(fd, owner.user, owner.group) != 0 {
            failed = failure(.setOwner, code: errno)
        }
        if failed == nil {
            failed = writeAll(bytes, to: fd).map { failure(.write, code: $0.code, reason: $0.reason) }
        }
        if failed == nil, fsync(fd) != 0 { failed = failure(.write, code: errno) }
        if close(fd) != 0, failed == nil { failed = failure(.write, code: errno) }
        if failed == nil, rename(temporary, path) != 0 { failed = failure(.rename, code: errno) }
        if let failed {
            // A full disk must not leave half a file behind.
            unlink(temporary)
            throw failed
        }
        syncFolder(containing: path)
    }

    /// Flushes `folder`'s entries: a file created, renamed or deleted in it is only durable then.
    public static func syncFolder(_ folder: String) {
        let fd = open(folder.isEmpty ? "." : folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// Flushes the folder `path` is in.
    public static func syncFolder(containing path: String) {
        guard let slash = path.lastIndex(of: "/") else { return syncFolder(".") }
        syncFolder(slash == path.startIndex ? "/" : String(path[..<slash]))
    }

    /// Writes straight from the buffer: no second copy of a multi-megabyte segment.
    /// Writes every byte to `fd` (again after `EINTR`); the error number and its text if it could
    /// not (no number: the disk took fewer bytes and said nothing).
    public static func writeAll(_ bytes: [UInt8], to fd: Int32) -> (code: Int32?, reason: String)? {
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                return n < 0 ? (errno, text(errno)) : (nil, "the disk took \(written) of \(bytes.count) bytes")
            }
            written += n
        }
        return nil
    }

    private static func text(_ code: Int32) -> String { String(cString: strerror(code)) }
}
