public import Foundation
public import HAL

public struct OutputError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "output folder \(path) is not writable: \(reason)" }
}

/// Writes segments as `<seq>-<UTC time>.mp4` into a folder: first under a hidden temporary name,
/// flushed to the disk, then renamed, and the folder flushed too. A power cut leaves whole
/// segments and, at worst, a temporary file, which the next start removes.
public struct SegmentFileWriter: Sendable {
    public let directory: URL

    /// Creates the folder if needed and proves it takes a file.
    public init(directory path: String) throws(OutputError) {
        directory = URL(fileURLWithPath: path, isDirectory: true)
        let probe = directory.appendingPathComponent(".write-test-\(getpid())")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Data().write(to: probe)
            try FileManager.default.removeItem(at: probe)
        } catch {
            throw OutputError(path: path, reason: Self.reason(error))
        }
        removedLeftovers = Self.removeLeftovers(in: directory)
    }

    /// Temporary files a power cut or a kill left behind, removed when the writer was made.
    public private(set) var removedLeftovers: [String] = []

    private static func removeLeftovers(in directory: URL) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        let leftovers = names.filter { $0.hasPrefix(".") && ($0.hasSuffix(".partial") || $0.hasPrefix(".write-test-")) }
        for name in leftovers { try? FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
        return leftovers
    }

    /// Writes the segment and returns its file name.
    @discardableResult
    public func write(_ segment: Segment) throws -> String {
        let name = Self.fileName(for: segment.metadata)
        let temporary = directory.appendingPathComponent(".\(name).partial")
        do {
            try Self.writeFile(temporary.path, segment.data)
        } catch {
            // A full disk must not leave half a segment behind.
            unlink(temporary.path)
            throw error
        }
        let final = directory.appendingPathComponent(name)
        guard rename(temporary.path, final.path) == 0 else {
            throw OutputError(path: directory.path, reason: String(cString: strerror(errno)))
        }
        // The rename itself is only durable once the folder's entry is on the disk.
        let folder = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
        return name
    }

    /// Writes straight from the segment's buffer: no second copy of a multi-megabyte segment.
    private static func writeFile(_ path: String, _ bytes: [UInt8]) throws(OutputError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw OutputError(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw OutputError(path: path, reason: String(cString: strerror(errno))) }
            written += n
        }
        guard fsync(fd) == 0 else { throw OutputError(path: path, reason: String(cString: strerror(errno))) }
    }

    public static func fileName(for metadata: SegmentMetadata) -> String {
        let time = metadata.capturedAt.formatted(
            Date.ISO8601FormatStyle(dateSeparator: .omitted, dateTimeSeparator: .standard, timeSeparator: .omitted, includingFractionalSeconds: true))
        return String(format: "%06d-", metadata.seq) + time + ".mp4"
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? CocoaError, let underlying = error.underlying as? POSIXError {
            return String(cString: strerror(underlying.code.rawValue))
        }
        return (error as NSError).localizedDescription
    }
}

extension CocoaError {
    fileprivate var underlying: (any Error)? { userInfo[NSUnderlyingErrorKey] as? any Error }
}
