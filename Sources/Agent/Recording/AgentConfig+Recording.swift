import Foundation

extension AgentConfig {
    /// `recording.*` limits in bytes. Without `recording.maxMegabytes`, unprotected segments are
    /// kept under ``defaultCapPercent`` of the size of the disk that holds `recording.dir`, so
    /// logs, updates and protected segments keep room on a card the car never empties.
    public var retention: Retention {
        Retention(
            maxBytes: recording.maxMegabytes.map { Int64($0) << 20 } ?? Self.defaultCap(for: recording.dir),
            protectedMaxBytes: Int64(recording.protectedMaxMegabytes) << 20,
            minFreeBytes: Int64(recording.minFreeMegabytes) << 20)
    }

    public static let defaultCapPercent: Int64 = 80

    /// ``defaultCapPercent`` of the filesystem holding `dir` (or its nearest existing parent);
    /// `nil` when it cannot be measured.
    static func defaultCap(for dir: String) -> Int64? {
        guard let size = (FileSystemSpace(nearest: dir)?.size).flatMap({ $0 > 0 ? $0 : nil }) else { return nil }
        return size / 100 * defaultCapPercent
    }
}

/// The size and the space left of the filesystem holding a path, or its nearest existing parent
/// (a recording folder is made at start).
struct FileSystemSpace {
    /// The path measured.
    let path: String
    let size: Int64
    /// Free to an unprivileged writer.
    let available: Int64

    init?(nearest dir: String) {
        var path = dir.isEmpty ? "." : dir
        while !FileManager.default.fileExists(atPath: path) {
            let parent = (path as NSString).deletingLastPathComponent
            guard !parent.isEmpty, parent != path else { return nil }
            path = parent
        }
        guard let attributes = try? FileManager.default.attributesOfFileSystem(forPath: path),
            let size = (attributes[.systemSize] as? NSNumber)?.int64Value,
            let available = (attributes[.systemFreeSize] as? NSNumber)?.int64Value
        else { return nil }
        self.path = path
        self.size = size
        self.available = available
    }
}
