import Foundation
import Glibc

/// Replaces a configuration file whole: the new text goes to a temporary file beside it, which is
/// flushed and renamed over the old one, and the folder is flushed. A program reading the file
/// meanwhile (a running server, the agent's reload) sees the old file or the new one, never half,
/// and a power cut leaves one of the two.
///
/// Run as root, the file keeps its owner and group (a new file takes its folder's), so the service
/// user that reads it still can. `guidance-server token` and `dashcam-agent setup` write with it.
public enum ConfigFileWriter {
    public struct WriteError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Writes `text` to `path` with `mode`, or the existing file's mode when `keepMode` and it exists.
    public static func replace(_ path: String, with text: String, mode wanted: Int, keepMode: Bool = false) throws(WriteError) {
        let url = URL(fileURLWithPath: path)
        let folder = url.deletingLastPathComponent().path
        let existing = try? FileManager.default.attributesOfItem(atPath: path)
        let owner = existing ?? (try? FileManager.default.attributesOfItem(atPath: folder))
        var mode = mode_t(wanted)
        if keepMode, let kept = (existing?[.posixPermissions] as? NSNumber)?.uint16Value {
            mode = mode_t(kept)
        }
        let temporary = "\(folder)/.\(url.lastPathComponent).\(getpid()).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw WriteError(description: "cannot write \(temporary): \(String(cString: strerror(errno)))") }
        var failure: String?
        if fchmod(fd, mode) != 0 { failure = "cannot set its mode: \(String(cString: strerror(errno)))" }
        if failure == nil, getuid() == 0, let uid = (owner?[.ownerAccountID] as? NSNumber)?.uint32Value,
           let gid = (owner?[.groupOwnerAccountID] as? NSNumber)?.uint32Value, fchown(fd, uid, gid) != 0 {
            failure = "cannot give it the owner of \(path): \(String(cString: strerror(errno)))"
        }
        if failure == nil {
            let bytes = Array(text.utf8)
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    failure = n < 0 ? String(cString: strerror(errno)) : "the disk took \(written) of \(bytes.count) bytes"
                    break
                }
                written += n
            }
        }
        if failure == nil, fsync(fd) != 0 { failure = String(cString: strerror(errno)) }
        close(fd)
        if failure == nil, rename(temporary, path) != 0 { failure = String(cString: strerror(errno)) }
        if let failure {
            unlink(temporary)
            throw WriteError(description: "cannot write \(path): \(failure)")
        }
        let folderFD = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folderFD >= 0 {
            fsync(folderFD)
            close(folderFD)
        }
    }
}
