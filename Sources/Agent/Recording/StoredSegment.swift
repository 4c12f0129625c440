public import Foundation
public import HAL
import UTC

/// A segment file in the recording folder: `<dir>/<UTC day>/<seq>-<UTC time>.mp4`, or
/// `<dir>/protected/<UTC day>/…` once kept for an incident.
public struct StoredSegment: Sendable, Equatable {
    /// Relative to the recording folder, e.g. `2026-11-23/000012-20261123T093000.123Z.mp4`.
    public let path: String
    public let seq: Int
    public let capturedAt: Date
    public let bytes: Int64
    public var name: String { path.split(separator: "/").last.map(String.init) ?? path }
    public var isProtected: Bool { path.hasPrefix(StoredSegment.protectedFolder + "/") }

    /// The folder, under the recording folder, of the segments kept with `protect`.
    public static let protectedFolder = "protected"

    /// `<seq>-<UTC time>.mp4`: the sequence restarts with the agent, the capture time does not.
    public static func fileName(for metadata: SegmentMetadata) -> String {
        let seq = String(metadata.seq)
        return String(repeating: "0", count: max(0, 6 - seq.count)) + seq + "-" + UTCTime(metadata.capturedAt).basic + ".mp4"
    }

    /// The day folder, `YYYY-MM-DD` in UTC like the times in the names.
    public static func dayFolder(for date: Date) -> String {
        UTCTime(date).dayString
    }

    /// Where a new segment goes, relative to the recording folder.
    static func path(for metadata: SegmentMetadata, protected: Bool) -> String {
        let day = dayFolder(for: metadata.capturedAt) + "/" + fileName(for: metadata)
        return protected ? protectedFolder + "/" + day : day
    }

    init(path: String, seq: Int, capturedAt: Date, bytes: Int64) {
        self.path = path
        self.seq = seq
        self.capturedAt = capturedAt
        self.bytes = bytes
    }

    /// Nil for anything that is not a segment name (notes, hidden or temporary files).
    public init?(path: String, bytes: Int64) {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard !name.hasPrefix("."), name.hasSuffix(".mp4"), let dash = name.firstIndex(of: "-"),
            let seq = Int(name[..<dash]),
            let capturedAt = UTCTime(basic: name[name.index(after: dash)...].dropLast(4))?.date
        else { return nil }
        self.path = path
        self.seq = seq
        self.capturedAt = capturedAt
        self.bytes = bytes
    }

    /// Every segment under `root`, oldest capture time first: the day folders, the protected day
    /// folders, and segments an earlier version wrote straight into `root`.
    static func all(in root: URL) -> [StoredSegment] {
        var found: [StoredSegment] = []
        for folder in folders(in: root) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(folder).path)) ?? []
            for name in names {
                let path = folder.isEmpty ? name : folder + "/" + name
                // A link is never counted, moved or deleted: what it points at is not the recording's.
                guard isRegularFile(root.appendingPathComponent(path)) else { continue }
                let size = (try? FileManager.default.attributesOfItem(atPath: root.appendingPathComponent(path).path)[.size] as? NSNumber)?
                    .int64Value
                if let segment = StoredSegment(path: path, bytes: size ?? 0) { found.append(segment) }
            }
        }
        return found.sorted { ($0.capturedAt, $0.path) < ($1.capturedAt, $1.path) }
    }

    /// `""` (the root itself), the day folders and the protected day folders, relative to `root`.
    static func folders(in root: URL) -> [String] {
        func days(_ folder: String) -> [String] {
            let url = root.appendingPathComponent(folder)
            guard folder.isEmpty || isRealFolder(url) else { return [] }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
            return names.filter { isDayName($0) && isRealFolder(url.appendingPathComponent($0)) }.sorted().map {
                folder.isEmpty ? $0 : folder + "/" + $0
            }
        }
        return [""] + days("") + days(protectedFolder)
    }

    static func isDayName(_ name: String) -> Bool {
        name.count == 10
            && name.enumerated().allSatisfy { index, character in
                index == 4 || index == 7 ? character == "-" : character.isASCII && character.isNumber
            }
    }
}
