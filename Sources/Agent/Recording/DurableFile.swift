public import Foundation
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
/// flushed, renamed, and the folder flushed too. A power cut leaves at worst a temporary file
/// (`.NAME.partial`), which ``removeLeftovers(in:)`` deletes at the next start.
enum DurableFile {
    static func write(_ bytes: [UInt8], to file: URL) throws(OutputError) {
        let temporary = file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).partial")
        do {
            try writeAndFlush(temporary.path, bytes)
        } catch {
            // A full disk must not leave half a segment behind.
            unlink(temporary.path)
            throw error
        }
        try move(temporary, to: file)
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

    /// Creates `folder` (and its parents) if missing, flushing the parent that gained it.
    static func makeFolder(_ folder: URL) throws(OutputError) {
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
        let fd = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// Temporary files an interrupted write left in `folder`; returns their names.
    static func removeLeftovers(in folder: URL) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        let leftovers = names.filter { $0.hasPrefix(".") && ($0.hasSuffix(".partial") || $0.hasPrefix(".write-test-")) }
        for name in leftovers { unlink(folder.appendingPathComponent(name).path) }
        return leftovers
    }

    /// Proves that `folder` takes a file, creating it if needed.
    static func checkWritable(_ folder: URL) throws(OutputError) {
        try makeFolder(folder)
        let probe = folder.appendingPathComponent(".write-test-\(getpid())")
        do {
            try Data().write(to: probe)
            try FileManager.default.removeItem(at: probe)
        } catch {
            throw OutputError(path: folder.path, reason: reason(error))
        }
    }

    /// Writes straight from the buffer: no second copy of a multi-megabyte segment.
    private static func writeAndFlush(_ path: String, _ bytes: [UInt8]) throws(OutputError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw OutputError(path: path) }
        defer { close(fd) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw OutputError(path: path) }
            written += n
        }
        guard fsync(fd) == 0 else { throw OutputError(path: path) }
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? CocoaError, let underlying = error.userInfo[NSUnderlyingErrorKey] as? POSIXError {
            return String(cString: strerror(underlying.code.rawValue))
        }
        return (error as NSError).localizedDescription
    }
}
