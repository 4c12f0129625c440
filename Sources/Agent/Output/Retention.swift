public import Foundation
import Glibc

/// Loop recording: before each new segment, the oldest segments in the folder are deleted until
/// the folder is under its cap and the disk keeps its minimum free space.
///
/// Segments are ordered by their capture time, the part of the name after `<seq>-`, because the
/// sequence number starts again at every start of the agent.
public struct Retention: Sendable {
    public let directory: URL
    public let maxBytes: Int64?
    public let minFreeBytes: Int64

    public init(directory: URL, maxBytes: Int64?, minFreeBytes: Int64) {
        self.directory = directory
        self.maxBytes = maxBytes
        self.minFreeBytes = minFreeBytes
    }

    /// Makes room for `incoming` more bytes; returns the names of the segments deleted.
    public func makeRoom(for incoming: Int) -> [String] {
        var segments = Self.segments(in: directory)
        var total = segments.reduce(Int64(0)) { $0 + $1.bytes }
        var free = freeBytes()
        var deleted: [String] = []
        while let oldest = segments.first,
              (maxBytes.map { total + Int64(incoming) > $0 } ?? false) || (free.map { $0 - Int64(incoming) < minFreeBytes } ?? false) {
            segments.removeFirst()
            guard (try? FileManager.default.removeItem(at: directory.appendingPathComponent(oldest.name))) != nil else { continue }
            total -= oldest.bytes
            free = free.map { $0 + oldest.bytes }
            deleted.append(oldest.name)
        }
        return deleted
    }

    /// Free bytes for an unprivileged writer on the folder's filesystem; nil if unknown.
    func freeBytes() -> Int64? {
        var info = statvfs()
        guard statvfs(directory.path, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// `<seq>-<time>.mp4` files, oldest capture time first.
    static func segments(in directory: URL) -> [(name: String, bytes: Int64)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names
            .filter { !$0.hasPrefix(".") && $0.hasSuffix(".mp4") && $0.contains("-") }
            .sorted { captureTime(of: $0) < captureTime(of: $1) }
            .map { name in
                let size = (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.size] as? NSNumber)?.int64Value
                return (name, size ?? 0)
            }
    }

    private static func captureTime(of name: String) -> Substring {
        name.drop { $0 != "-" }
    }
}
