import Glibc

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
        var path = dir.isEmpty ? "." : dir
        var info = statvfs()
        while statvfs(path, &info) != 0 {
            guard errno == ENOENT, path != "/", path != "." else { return nil }
            let parent = path.split(separator: "/", omittingEmptySubsequences: true).dropLast().joined(separator: "/")
            path = parent.isEmpty ? (path.hasPrefix("/") ? "/" : ".") : (path.hasPrefix("/") ? "/" + parent : parent)
        }
        let (size, overflow) = Int64(clamping: info.f_blocks).multipliedReportingOverflow(by: Int64(clamping: info.f_frsize))
        guard !overflow, size > 0 else { return nil }
        return size / 100 * defaultCapPercent
    }
}
