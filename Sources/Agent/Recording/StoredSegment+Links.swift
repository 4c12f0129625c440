public import Foundation
import Glibc
public import Logging

/// Symbolic links inside the recording folder. The listing skips them and the writes refuse them,
/// so a day folder linked elsewhere is never filled, counted or emptied by the loop; they are
/// named once in the log when the store opens, for the owner to remove.
extension StoredSegment {
    /// The links where the recording would otherwise look (day folders, `protected/` and its day
    /// folders, segment files, temporary files), relative to `root`, each with what it points at.
    public static func symbolicLinks(in root: URL) -> [(path: String, target: String)] {
        var found: [(path: String, target: String)] = []
        func look(in folder: String, keep: (String) -> Bool) -> [String] {
            let url = folder.isEmpty ? root : root.appendingPathComponent(folder)
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).sorted()
            for name in names where keep(name) && RecordingFiles.isSymbolicLink(url.appendingPathComponent(name).path) {
                let path = folder.isEmpty ? name : folder + "/" + name
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: url.appendingPathComponent(name).path)) ?? "?"
                found.append((path, target))
            }
            return names.filter { isDayName($0) && isRealFolder(url.appendingPathComponent($0)) }.map {
                folder.isEmpty ? $0 : folder + "/" + $0
            }
        }
        func isRecordingName(_ name: String) -> Bool {
            isDayName(name) || StoredSegment(path: name, bytes: 0) != nil || name.hasSuffix(".partial")
        }
        var days = look(in: "") { isRecordingName($0) || $0 == protectedFolder }
        if isRealFolder(root.appendingPathComponent(protectedFolder)) {
            days += look(in: protectedFolder, keep: isRecordingName)
        }
        for day in days { _ = look(in: day, keep: isRecordingName) }
        return found
    }

    /// Logs the links ``symbolicLinks(in:)`` finds, one warning naming them all; silent without any.
    public static func warnAboutSymbolicLinks(in root: URL, logger: Logger) {
        let links = symbolicLinks(in: root)
        guard !links.isEmpty else { return }
        let named = links.prefix(10).map { "\($0.path) -> \($0.target)" }.joined(separator: ", ")
        logger.warning(
            "recording: \(links.count) symbolic link(s) in \(root.path) are skipped and never followed (not counted, moved or deleted; segments are not written through them): \(named)\(links.count > 10 ? ", …" : "")"
        )
    }

    static func isRealFolder(_ url: URL) -> Bool {
        var info = stat()
        return lstat(url.path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    static func isRegularFile(_ url: URL) -> Bool {
        var info = stat()
        return lstat(url.path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }
}
