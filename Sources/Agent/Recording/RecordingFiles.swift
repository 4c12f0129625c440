import FileSupport
import Foundation
import Glibc

public struct OutputError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "recording folder \(path) is not writable: \(reason)" }

    init(path: String, errno code: Int32 = errno) {
        self.init(path: path, reason: String(cString: strerror(code)))
    }

    init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }
}

/// Files that are either whole on the disk or not there: written under a hidden temporary name,
/// flushed, renamed, and the folder flushed too (``DurableFileWriter``). A power cut leaves at
/// worst a temporary file (`.NAME.partial`), which ``removeLeftovers(in:)`` deletes at the next start.
///
/// Symbolic links inside the recording folder are never followed: the temporary file is made
/// new (`O_EXCL | O_NOFOLLOW`), a day folder or `protected/` that is a link is refused, and
/// ``remove(_:in:)`` deletes without passing through one.
enum RecordingFiles {
    static func write(_ bytes: [UInt8], to file: URL) throws(OutputError) {
        let temporary = file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).partial")
        do {
            try DurableFileWriter.write(bytes, to: file.path, temporary: temporary.path)
        } catch {
            throw OutputError(path: error.step == .rename ? file.path : temporary.path, reason: error.reason)
        }
    }

    /// Renames within one filesystem and flushes the folders involved: the rename is only
    /// durable once the folders' entries are on the disk.
    static func move(_ source: URL, to destination: URL) throws(OutputError) {
        guard rename(source.path, destination.path) == 0 else { throw OutputError(path: destination.path) }
        syncFolder(destination.deletingLastPathComponent())
        if source.deletingLastPathComponent() != destination.deletingLastPathComponent() {
            syncFolder(source.deletingLastPathComponent())
        }
    }

    /// Creates the day folder `folder` (and its parents) if missing, flushing the parent that
    /// gained it. A day folder, or the `protected/` folder above it, that is a symbolic link is
    /// refused: what it points at is not the recording's to fill or delete.
    static func makeFolder(_ folder: URL) throws(OutputError) {
        let parent = folder.deletingLastPathComponent()
        for checked in [folder] + (parent.lastPathComponent == StoredSegment.protectedFolder ? [parent] : [])
        where isSymbolicLink(checked.path) {
            throw OutputError(path: checked.path, reason: "it is a symbolic link, which the recording never follows")
        }
        try makeFolderFollowingLinks(folder)
    }

    /// The recording folder itself may be a link (to another disk, say): that is the config's choice.
    private static func makeFolderFollowingLinks(_ folder: URL) throws(OutputError) {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder), isFolder.boolValue { return }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw OutputError(path: folder.path, reason: reason(error))
        }
        syncFolder(folder.deletingLastPathComponent())
    }

    static func syncFolder(_ folder: URL) {
        DurableFileWriter.syncFolder(folder.path)
    }

    /// Temporary files an interrupted write left in `folder`; returns their names.
    static func removeLeftovers(in folder: URL) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        // And a segment's GPS track whose segment is not beside it (a power cut while one of the
        // two was moved or deleted).
        let leftovers =
            names.filter { $0.hasPrefix(".") && ($0.hasSuffix(".partial") || $0.hasPrefix(".write-test-")) }
            + names.filter { $0.hasSuffix(".gpx") && !$0.hasPrefix(".") && !names.contains(String($0.dropLast(4)) + ".mp4") }
        for name in leftovers { unlink(folder.appendingPathComponent(name).path) }
        return leftovers
    }

    /// Proves that `folder` takes a file, creating it if needed.
    static func checkWritable(_ folder: URL) throws(OutputError) {
        try makeFolderFollowingLinks(folder)
        let probe = folder.appendingPathComponent(".write-test-\(getpid())").path
        // Made new, not through a link someone left under that name.
        unlink(probe)
        let fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw OutputError(path: folder.path) }
        close(fd)
        unlink(probe)
    }

    /// Deletes `path` (relative to `root`) without following a symbolic link on the way: each
    /// folder is opened with `O_NOFOLLOW`, and a link at the end is deleted itself, not what it
    /// points at. Returns 0 or the `errno` of the failure (`ELOOP`/`ENOTDIR`: a folder on the way
    /// is a link).
    static func remove(_ path: String, in root: URL) -> Int32 {
        var parts = path.split(separator: "/").map(String.init)
        guard let name = parts.popLast(), !parts.contains(".."), name != ".." else { return EINVAL }
        var folder = open(root.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return errno }
        defer { close(folder) }
        for part in parts {
            let next = openat(folder, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard next >= 0 else { return errno }
            close(folder)
            folder = next
        }
        return unlinkat(folder, name, 0) == 0 ? 0 : errno
    }

    static func isSymbolicLink(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? CocoaError, let underlying = error.userInfo[NSUnderlyingErrorKey] as? POSIXError {
            return String(cString: strerror(underlying.code.rawValue))
        }
        return (error as NSError).localizedDescription
    }
}
