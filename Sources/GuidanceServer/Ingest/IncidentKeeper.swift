import Foundation
import GuidanceProtocol
import UTC

/// Keeps the segments of the incidents a car reports (`incident`), whatever the analysis says:
/// `<server.keepDir>/incidents/<device>-<stream>-<id>/` holds `incident.json` (the car's last
/// message about it, and when it came) and each segment it names, a hard link to the segment's
/// file in `keepDir` (a copy where the file system has no links). A segment named before it
/// arrives is linked when it does. Without `keepDir` nothing is kept and the incident is only
/// logged.
///
/// One per session, used from its receive loop only.
struct IncidentKeeper {
    static let folderName = "incidents"
    /// Segments named but not arrived, across this session's incidents: a bound on what a car can
    /// make the session remember.
    static let maxWaiting = 256

    let keepDir: String?
    let device: String
    let stream: String
    /// Seq → the incident folders waiting for it.
    private(set) var waiting: [Int: Set<String>] = [:]

    struct Kept: Equatable {
        var folder: String
        var linked: [Int]
        var waiting: [Int]
    }

    /// Writes the incident's record and links the segments it names that are there; nil without
    /// `keepDir`. Throws if the folder or the record cannot be written.
    mutating func keep(_ incident: ClientMessage.Incident, now: Date = .now) throws -> Kept? {
        guard let keepDir else { return nil }
        let root = URL(fileURLWithPath: keepDir).appendingPathComponent(Self.folderName)
        let folder = root.appendingPathComponent(Self.folderName(device: device, stream: stream, id: incident.id))
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        struct Record: Encodable {
            var incident: ClientMessage.Incident
            var device: String
            var stream: String
            var receivedAt: String
        }
        let record = Record(incident: incident, device: device, stream: stream, receivedAt: now.rfc3339Milliseconds)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(record).write(to: folder.appendingPathComponent("incident.json"), options: .atomic)
        var kept = Kept(folder: folder.path, linked: [], waiting: [])
        for seq in Set(incident.seqs).sorted() {
            let file = URL(fileURLWithPath: keepDir).appendingPathComponent(
                StreamSession.keptName(device: device, stream: stream, seq: seq))
            if Self.link(file, into: folder) {
                kept.linked.append(seq)
            } else if waiting.values.reduce(0, { $0 + $1.count }) < Self.maxWaiting {
                waiting[seq, default: []].insert(folder.path)
                kept.waiting.append(seq)
            }
        }
        return kept
    }

    /// `<device>-<stream>-<id>`, safe as a file name like the segments' (the id was checked to be).
    static func folderName(device: String, stream: String, id: String) -> String {
        "\(StreamSession.fileSafe(device))-\(StreamSession.fileSafe(stream))-\(StreamSession.fileSafe(id))"
    }

    /// A segment was written to `keepDir` as `file`: into every incident waiting for it. Returns
    /// the folders it went into.
    mutating func kept(seq: Int, file: URL) -> [String] {
        guard let folders = waiting.removeValue(forKey: seq) else { return [] }
        return folders.sorted().filter { Self.link(file, into: URL(fileURLWithPath: $0)) }
    }

    /// A hard link of `file` in `folder` (already there counts), else a copy; false if `file` is not there.
    private static func link(_ file: URL, into folder: URL) -> Bool {
        let target = folder.appendingPathComponent(file.lastPathComponent)
        guard FileManager.default.fileExists(atPath: file.path) else { return false }
        if FileManager.default.fileExists(atPath: target.path) { return true }
        if (try? FileManager.default.linkItem(at: file, to: target)) != nil { return true }
        return (try? FileManager.default.copyItem(at: file, to: target)) != nil
    }
}
