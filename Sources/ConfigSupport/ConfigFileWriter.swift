import FileSupport
import Foundation
import Glibc

/// Replaces a configuration file whole, through ``DurableFileWriter``: a program reading the file
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
        let ownerSource = existing ?? (try? FileManager.default.attributesOfItem(atPath: folder))
        var mode = wanted
        if keepMode, let kept = (existing?[.posixPermissions] as? NSNumber)?.intValue {
            mode = kept
        }
        var owner: (user: UInt32, group: UInt32)?
        if getuid() == 0, let uid = (ownerSource?[.ownerAccountID] as? NSNumber)?.uint32Value,
            let gid = (ownerSource?[.groupOwnerAccountID] as? NSNumber)?.uint32Value
        {
            owner = (uid, gid)
        }
        let temporary = "\(folder)/.\(url.lastPathComponent).\(getpid()).tmp"
        do {
            try DurableFileWriter.write(Array(text.utf8), to: path, temporary: temporary, mode: mode, exactMode: true, owner: owner)
        } catch {
            switch error.step {
            case .setMode:
                throw WriteError(description: "cannot write \(path): cannot set its mode: \(error.reason)")
            case .setOwner:
                throw WriteError(description: "cannot write \(path): cannot give it the owner of \(path): \(error.reason)")
            case .create, .write, .rename:
                throw WriteError(description: error.description)
            }
        }
    }
}
