import FileSupport
public import Foundation
public import GuidanceProtocol
import HAL
import UTC

/// The clips the car still owes its owner's server, on the card: one file each,
/// `protected/uploads/<id>.json`, written whole (``RecordingFiles``) before the clip is first
/// announced and deleted only once the server has said every file of it is stored. A reboot, a
/// power cut or a killed agent finds them again (``all()``); the server's `clip_have` says where
/// each upload stands.
///
/// The evidence files themselves stay where the recording keeps them (protected); a part is read
/// from the file at the moment it is sent.
public struct ClipCustody: Sendable {
    /// A clip and where its files are, relative to the recording folder.
    public struct Entry: Codable, Sendable, Equatable {
        public var clip: ClientMessage.Clip
        /// By file name.
        public var paths: [String: String]
    }

    public static let folder = StoredSegment.protectedFolder + "/uploads"

    /// The recording folder.
    public let root: URL

    public init(root: URL) { self.root = root }

    var folderURL: URL { root.appendingPathComponent(Self.folder) }

    private func file(of id: String) -> URL { folderURL.appendingPathComponent(id + ".json") }

    /// Kept until ``release(_:)``.
    public func keep(_ entry: Entry) throws(OutputError) {
        do {
            try FileManager.default.createDirectory(at: folderURL, withIntermediateDirectories: true)
        } catch {
            throw OutputError(path: folderURL.path, reason: "\(error)")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes: Data
        do { bytes = try encoder.encode(entry) } catch { throw OutputError(path: file(of: entry.clip.id).path, reason: "\(error)") }
        try RecordingFiles.write(Array(bytes), to: file(of: entry.clip.id))
    }

    /// The server holds every file of it.
    public func release(_ id: String) {
        guard ClientMessage.Clip.isClipID(id) else { return }
        _ = RecordingFiles.remove(Self.folder + "/" + id + ".json", in: root)
    }

    /// Every clip kept, oldest trigger first; a file that cannot be read is named in `unreadable`
    /// and left where it is (for a person to look at), not guessed at.
    public func all() -> (entries: [Entry], unreadable: [String]) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folderURL.path)) ?? []).filter {
            $0.hasSuffix(".json") && !$0.hasPrefix(".")
        }
        var entries: [Entry] = []
        var unreadable: [String] = []
        for name in names.sorted() {
            guard let data = try? Data(contentsOf: folderURL.appendingPathComponent(name)),
                let entry = try? JSONDecoder().decode(Entry.self, from: data),
                entry.clip.id + ".json" == name, entry.clip.problem(maxFileBytes: .max) == nil
            else {
                unreadable.append(Self.folder + "/" + name)
                continue
            }
            entries.append(entry)
        }
        return (entries.sorted { ($0.clip.at, $0.clip.id) < ($1.clip.at, $1.clip.id) }, unreadable)
    }

    /// The bytes of a part, read from the file now. The file may have moved into `protected/`
    /// since the clip was made (a later `protect` of the same segment); it is looked for there too.
    public func read(_ part: ClientMessage.ClipPart, of entry: Entry) throws(ClipReadError) -> [UInt8] {
        guard let path = entry.paths[part.name] else { throw ClipReadError(name: part.name, reason: "not a file of clip \(part.id)") }
        let candidates = path.hasPrefix(StoredSegment.protectedFolder + "/") ? [path] : [path, StoredSegment.protectedFolder + "/" + path]
        for candidate in candidates {
            let url = root.appendingPathComponent(candidate)
            let fd = open(url.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var bytes = [UInt8](repeating: 0, count: part.bytes)
            var done = 0
            while done < part.bytes {
                let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, part.bytes - done, off_t(part.offset + done)) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else {
                    throw ClipReadError(
                        name: part.name,
                        reason: count == 0 ? "shorter than it was (\(part.offset + done) bytes)" : String(cString: strerror(errno)))
                }
                done += count
            }
            return bytes
        }
        throw ClipReadError(name: part.name, reason: "no longer on the card")
    }

    /// A clip of the stored segments, each file's size and SHA-256 read now (a second or so a
    /// hundred megabytes on a small board: call it off the cooperative pool). Segments that are
    /// gone are left out; none left, nil.
    public static func make(
        id: String, kind: String, at: Date, from: Date, to: Date, clock: String?, peakG: Double?,
        segments: [StoredSegment], gps: [GPSPosition], root: URL
    ) -> Entry? {
        var files: [ClientMessage.Clip.File] = []
        var paths: [String: String] = [:]
        for segment in segments.sorted(by: { $0.capturedAt < $1.capturedAt }).prefix(ClientMessage.Clip.maxFiles)
        where ClientMessage.Clip.isFileName(segment.name) && paths[segment.name] == nil {
            guard let digest = try? FileDigest.sha256(ofFile: root.appendingPathComponent(segment.path).path), digest.bytes > 0 else {
                continue
            }
            files.append(.init(name: segment.name, bytes: digest.bytes, sha256: digest.hex))
            paths[segment.name] = segment.path
        }
        guard let first = segments.first(where: { paths[$0.name] != nil }) else { return nil }
        let start = min(from, first.capturedAt)
        let triggerMs = Int((at.timeIntervalSince(start) * 1000).rounded())
        let track = Array(gps.suffix(ClientMessage.Clip.maxPositions))
        let clip = ClientMessage.Clip(
            id: id, kind: kind, at: UTCTime(at).rfc3339, from: UTCTime(from).rfc3339, to: UTCTime(max(to, at)).rfc3339, clock: clock,
            peakG: peakG, triggerMs: (0...Int(ClientMessage.Clip.maxWindowSeconds) * 1000).contains(triggerMs) ? triggerMs : nil,
            files: files, gps: track.isEmpty ? nil : track)
        return Entry(clip: clip, paths: paths)
    }
}

public struct ClipReadError: Error, CustomStringConvertible {
    public let name: String
    public let reason: String
    public var description: String { "\(name): \(reason)" }
}
