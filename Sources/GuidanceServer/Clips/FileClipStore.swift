import Crypto
import FileSupport
public import Foundation
public import GuidanceProtocol
import Glibc
import UTC

/// Clips in a folder (`clips.dir`): `<dir>/<device>/<clip id>/` holds `clip.json` (the car's
/// description and when it came) and the clip's files, each `<name>.part` while its bytes come and
/// `<name>` once they all came and matched the SHA-256 the car announced.
///
/// What is held of a file is what is on disk, read again at every call, so a server that was
/// killed, or another instance on the same shared folder, goes on from the bytes that reached the
/// disk; a torn tail can only be a shorter prefix of the car's bytes, and the SHA-256 at the end
/// catches anything else (the file is then dropped and sent again). Appends to one file are
/// serialised with `flock` on its `.part`, across sessions and instances. A file is renamed to
/// its name only after an `fsync`, and the folder is synced after the rename: "stored" is said
/// only of what survives a power cut.
public struct FileClipStore: ClipStore {
    public let root: String
    /// What one car's clips may take of the store, announced bytes of every clip it keeps there;
    /// nil is no bound.
    public let maxBytesPerDevice: Int?
    static let recordName = "clip.json"
    static let partSuffix = ".part"

    public init(root: String, maxBytesPerDevice: Int? = nil) {
        self.root = root
        self.maxBytesPerDevice = maxBytesPerDevice
    }

    struct Record: Codable {
        var device: String
        var clip: ClientMessage.Clip
        var receivedAt: String
    }

    public func announce(_ clip: ClientMessage.Clip, device: String, now: Date) throws -> ClipAppend {
        let folder = folder(device: device, id: clip.id)
        if let limit = maxBytesPerDevice {
            // Each file ≤ clips.maxFileMegabytes and at most 48 of them: the sums cannot overflow.
            let others =
                (try? clips(device: device))?.filter { $0.clip.id != clip.id }
                .reduce(0) { $0 + $1.clip.files.reduce(0) { $0 + $1.bytes } } ?? 0
            let needed = clip.files.reduce(0) { $0 + $1.bytes }
            guard others + needed <= limit else {
                return .refused("clip \(clip.id): its \(needed) bytes and the \(others) this car keeps already are more than its \(limit)")
            }
        }
        // Evidence stored whole is kept as it came: a car describing a stored clip otherwise (a
        // changed car, or a stolen one) is refused, and what an owner shared stays what they saw.
        if let previous = try? record(in: folder), previous.clip != clip,
            answer(previous.clip, in: folder, only: nil).stored
        {
            return .refused("clip \(clip.id) is stored whole already with another description; stored evidence is not replaced")
        }
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // A file described differently than before is another file: what was held of it goes.
        if let previous = try? record(in: folder) {
            for old in previous.clip.files where !clip.files.contains(old) {
                unlink(folder + "/" + old.name)
                unlink(folder + "/" + old.name + Self.partSuffix)
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let record = Record(device: device, clip: clip, receivedAt: now.rfc3339Milliseconds)
        let path = folder + "/" + Self.recordName
        try DurableFileWriter.write(Array(try encoder.encode(record)), to: path, temporary: path + ".tmp")
        // A file whose bytes all came before a crash cut its check short is checked now.
        for file in clip.files where (Self.size(of: folder + "/" + file.name + Self.partSuffix) ?? 0) >= file.bytes {
            let fd = open(folder + "/" + file.name + Self.partSuffix, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            guard flock(fd, LOCK_EX) == 0 else { continue }
            _ = try finish(file, fd: fd, in: folder)
        }
        return .held(answer(clip, in: folder, only: nil))
    }

    public func append(_ part: ClientMessage.ClipPart, _ bytes: Data, device: String) throws -> ClipAppend {
        let folder = folder(device: device, id: part.id)
        guard let record = try? record(in: folder), let file = record.clip.files.first(where: { $0.name == part.name }) else {
            return .refused("clip \(part.id) file \(part.name) was not announced")
        }
        let finalPath = folder + "/" + file.name
        if Self.size(of: finalPath) == file.bytes { return .held(answer(record.clip, in: folder, only: file.name)) }
        let partPath = finalPath + Self.partSuffix
        let fd = open(partPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o640)
        guard fd >= 0 else { throw ClipStoreError(path: partPath, errno) }
        defer { close(fd) }
        guard flock(fd, LOCK_EX) == 0 else { throw ClipStoreError(path: partPath, errno) }
        // Another session may have finished it while this one waited for the lock.
        if Self.size(of: finalPath) == file.bytes { return .held(answer(record.clip, in: folder, only: file.name)) }
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw ClipStoreError(path: partPath, errno) }
        let held = Int(end)
        if held >= file.bytes {
            let stored = try finish(file, fd: fd, in: folder)
            return stored
                ? .held(answer(record.clip, in: folder, only: file.name)) : .mismatch(answer(record.clip, in: folder, only: file.name))
        }
        switch ClipPartRule.decide(offset: part.offset, bytes: bytes.count, held: held, fileBytes: file.bytes) {
        case .resume:
            return .held(answer(record.clip, in: folder, only: file.name))
        case .overrun:
            return .refused(
                "clip \(part.id) file \(part.name): offset \(part.offset) and \(bytes.count) bytes reach past its \(file.bytes)")
        case .append:
            if let failure = DurableFileWriter.writeAll(Array(bytes), to: fd) { throw ClipStoreError(path: partPath, failure.code ?? EIO) }
        }
        guard held + bytes.count == file.bytes else { return .held(answer(record.clip, in: folder, only: file.name)) }
        let stored = try finish(file, fd: fd, in: folder)
        return stored
            ? .held(answer(record.clip, in: folder, only: file.name)) : .mismatch(answer(record.clip, in: folder, only: file.name))
    }

    /// A `.part` (open as `fd`, locked) whose bytes all came: made durable, checked, and named; or
    /// dropped if it is not the file announced. True if it is stored.
    private func finish(_ file: ClientMessage.Clip.File, fd: Int32, in folder: String) throws -> Bool {
        let partPath = folder + "/" + file.name + Self.partSuffix
        guard fsync(fd) == 0 else { throw ClipStoreError(path: partPath, errno) }
        guard Self.size(of: partPath) == file.bytes, try Self.sha256(of: partPath) == file.sha256 else {
            unlink(partPath)
            return false
        }
        guard rename(partPath, folder + "/" + file.name) == 0 else { throw ClipStoreError(path: folder + "/" + file.name, errno) }
        DurableFileWriter.syncFolder(folder)
        return true
    }

    public func clips(device: String) throws -> [StoredClip] {
        let deviceFolder = root + "/" + Self.folderName(device)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: deviceFolder) else { return [] }
        return names.filter(ClientMessage.Clip.isClipID).compactMap { name -> StoredClip? in
            let folder = deviceFolder + "/" + name
            guard let record = try? record(in: folder) else { return nil }
            let have = answer(record.clip, in: folder, only: nil).files.map(\.have)
            return StoredClip(device: record.device, clip: record.clip, receivedAt: record.receivedAt, have: have)
        }.sorted { ($0.clip.at, $0.clip.id) > ($1.clip.at, $1.clip.id) }
    }

    public func clip(device: String, id: String) throws -> StoredClip? {
        guard ClientMessage.Clip.isClipID(id) else { return nil }
        let folder = folder(device: device, id: id)
        guard let record = try? record(in: folder) else { return nil }
        return StoredClip(
            device: record.device, clip: record.clip, receivedAt: record.receivedAt,
            have: answer(record.clip, in: folder, only: nil).files.map(\.have))
    }

    public func delete(device: String, id: String) throws -> Bool {
        guard ClientMessage.Clip.isClipID(id) else { return false }
        return try remove(folder(device: device, id: id))
    }

    /// Takes a clip's folder away whole: under its lock (a share link being added finishes first,
    /// or finds it gone), renamed out of the store's names in one step, then deleted. A crash
    /// between the two leaves a `.deleted-…` folder that ``expire(before:)`` removes.
    private func remove(_ folder: String) throws -> Bool {
        let lock = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
        guard lock >= 0 else { return false }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw ClipStoreError(path: folder, errno) }
        let parent = (folder as NSString).deletingLastPathComponent
        let gone = parent + "/.deleted-" + (folder as NSString).lastPathComponent + "-" + UUID().uuidString
        guard rename(folder, gone) == 0 else {
            if errno == ENOENT { return false }  // another instance took it first
            throw ClipStoreError(path: folder, errno)
        }
        DurableFileWriter.syncFolder(parent)
        try? FileManager.default.removeItem(atPath: gone)
        return true
    }

    static let sharesName = "shares.json"

    public func shares(device: String, id: String) throws -> [ClipShare] {
        guard ClientMessage.Clip.isClipID(id) else { return [] }
        let path = folder(device: device, id: id) + "/" + Self.sharesName
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return try JSONDecoder().decode([ClipShare].self, from: data).sorted { $0.createdAtMs > $1.createdAtMs }
    }

    public func putShare(_ share: ClipShare, device: String, id: String) throws -> Bool {
        guard ClientMessage.Clip.isClipID(id) else { return false }
        let folder = folder(device: device, id: id)
        // Changes to one clip's links are serialised on its folder, across instances too, and
        // with its deletion (``remove(_:)``): a folder deleted meanwhile is not written to.
        let lock = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
        guard lock >= 0 else { return false }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw ClipStoreError(path: folder, errno) }
        guard (try? record(in: folder)) != nil else { return false }
        var all = try shares(device: device, id: id).filter { $0.id != share.id }
        all.append(share)
        let path = folder + "/" + Self.sharesName
        try DurableFileWriter.write(Array(try JSONEncoder().encode(all)), to: path, temporary: path + ".tmp")
        return true
    }

    public func path(device: String, id: String, name: String) -> String? {
        guard ClientMessage.Clip.isClipID(id), ClientMessage.Clip.isFileName(name) else { return nil }
        let path = folder(device: device, id: id) + "/" + name
        return Self.size(of: path) != nil ? path : nil
    }

    /// `flock` on `<root>/.owners/<owner>.lock` (a name no device has: it starts with a dot).
    public func withOwnerLock<T>(_ owner: Int64, _ body: () throws -> T) throws -> T {
        let folder = root + "/.owners"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let path = folder + "/\(owner).lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw ClipStoreError(path: path, errno) }
        defer { close(fd) }
        guard flock(fd, LOCK_EX) == 0 else { throw ClipStoreError(path: path, errno) }
        return try body()
    }

    public func expire(before cutoff: Date) throws -> Int {
        let devices = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        var deleted = 0
        for device in devices where !device.hasPrefix(".") {
            let deviceFolder = root + "/" + device
            for name in (try? FileManager.default.contentsOfDirectory(atPath: deviceFolder)) ?? [] {
                let folder = deviceFolder + "/" + name
                if name.hasPrefix(".deleted-") {
                    // A delete a crash cut between its rename and its removal.
                    try? FileManager.default.removeItem(atPath: folder)
                    continue
                }
                guard ClientMessage.Clip.isClipID(name) else { continue }
                // A folder without a readable description is a clip whose announce was cut short:
                // its own age (the folder's time) counts.
                let received =
                    (try? record(in: folder)).flatMap { Date(rfc3339: $0.receivedAt) }
                    ?? (try? FileManager.default.attributesOfItem(atPath: folder)[.modificationDate] as? Date) ?? nil
                guard let received, received < cutoff else { continue }
                if try remove(folder) { deleted += 1 }
            }
            if deleted > 0 { DurableFileWriter.syncFolder(deviceFolder) }
        }
        // Impact mails' marks (``claimNotice(device:id:)``) older than the cutoff.
        let notices = root + "/.notices"
        for device in (try? FileManager.default.contentsOfDirectory(atPath: notices)) ?? [] {
            for mark in (try? FileManager.default.contentsOfDirectory(atPath: notices + "/" + device)) ?? [] {
                let path = notices + "/" + device + "/" + mark
                if let made = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date, made < cutoff {
                    unlink(path)
                }
            }
        }
        return deleted
    }

    /// The mark ``claimNotice(device:id:)`` makes in the clip's folder (gone with the folder).

    /// The mark is `<root>/.notices/<device>/<id>`, apart from the clip's folder: a clip the owner
    /// deleted and the car announced again is not told twice. Marks go with retention.
    public func claimNotice(device: String, id: String) throws -> Bool {
        guard ClientMessage.Clip.isClipID(id), FileManager.default.fileExists(atPath: folder(device: device, id: id)) else { return false }
        let marks = root + "/.notices/" + Self.folderName(device)
        try FileManager.default.createDirectory(atPath: marks, withIntermediateDirectories: true)
        // O_EXCL: of every caller, on every instance sharing the folder, one makes the file.
        let fd = open(marks + "/" + id, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o640)
        guard fd >= 0 else {
            if errno == EEXIST { return false }
            throw ClipStoreError(path: marks + "/" + id, errno)
        }
        close(fd)
        // The mark outlives a power cut, or the mail could go twice.
        DurableFileWriter.syncFolder(marks)
        return true
    }

    // MARK: - On disk

    /// The clip's folder; its id was checked (``ClientMessage/Clip/isClipID(_:)``): no `/`, no `..`.
    func folder(device: String, id: String) -> String {
        root + "/" + Self.folderName(device) + "/" + id
    }

    /// The device as a folder name: never `.`, `..` or empty.
    static func folderName(_ device: String) -> String {
        let safe = StreamSession.fileSafe(device)
        return safe.isEmpty || safe.hasPrefix(".") ? "_" + safe : safe
    }

    private func record(in folder: String) throws -> Record {
        let data = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + Self.recordName))
        return try JSONDecoder().decode(Record.self, from: data)
    }

    /// What is held of each file (or of `only`), and whether every file is stored.
    private func answer(_ clip: ClientMessage.Clip, in folder: String, only: String?) -> ServerMessage.ClipHave {
        let held = clip.files.map { file -> ServerMessage.ClipHave.Held in
            let path = folder + "/" + file.name
            if Self.size(of: path) == file.bytes { return .init(name: file.name, have: file.bytes) }
            // A part as long as the file or longer is checked (or dropped) at the next call that
            // holds its lock; until then nothing of it counts.
            let part = Self.size(of: path + Self.partSuffix) ?? 0
            return .init(name: file.name, have: part < file.bytes ? part : 0)
        }
        let stored = zip(clip.files, held).allSatisfy { $0.bytes == $1.have }
        return .init(id: clip.id, files: only.map { name in held.filter { $0.name == name } } ?? held, stored: stored)
    }

    static func size(of path: String) -> Int? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            attributes[.type] as? FileAttributeType == .typeRegular
        else { return nil }
        return (attributes[.size] as? NSNumber)?.intValue
    }

    /// Lower-case hex SHA-256 of the file, read a megabyte at a time.
    static func sha256(of path: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw ClipStoreError(path: path, ENOENT) }
        defer { try? handle.close() }
        var hash = SHA256()
        while let block = try handle.read(upToCount: 1 << 20), !block.isEmpty { hash.update(data: block) }
        return StreamSession.StateMachine.hex(hash.finalize())
    }
}

public struct ClipStoreError: Error, CustomStringConvertible {
    public let path: String
    public let code: Int32
    init(path: String, _ code: Int32) {
        self.path = path
        self.code = code
    }
    public var description: String { "\(path): \(String(cString: strerror(code)))" }
}
