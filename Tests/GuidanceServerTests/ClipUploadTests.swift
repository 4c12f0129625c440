import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import TestSupport
import Testing

/// A car's clip upload as the server reads it (`clip`, then `clip_part`s each followed by one
/// binary message) and keeps it (``FileClipStore``): every message checked before its bytes are
/// read, a dropped link resumed where the disk says, a file stored only once its SHA-256 matched.
@Suite struct ClipUploadTests {
    static func file(_ name: String, _ bytes: [UInt8]) -> ClientMessage.Clip.File {
        .init(name: name, bytes: bytes.count, sha256: sha256Hex(bytes))
    }

    static func clip(
        id: String = "20261129T080230.822Z", kind: String = "incident", files: [ClientMessage.Clip.File],
        at: String = "2026-11-29T08:02:30.822Z", gps: [GPSPosition]? = nil
    ) -> ClientMessage.Clip {
        .init(
            id: id, kind: kind, at: at, from: "2026-11-29T08:02:20.822Z", to: "2026-11-29T08:02:40.822Z", clock: "synced",
            peakG: 2.4, triggerMs: 10_000, files: files, gps: gps)
    }

    static let first = [UInt8]((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    static let second = [UInt8]((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })

    // MARK: - The messages

    @Test func aValidClipIsAnnouncedAndABadOneRefused() {
        var machine = StreamSessionStateMachineTests.opened()
        let good = Self.clip(files: [Self.file("seg-000017.mp4", Self.first)])
        #expect(machine.text(ClientMessage.clip(good).encoded()) == [.announceClip(good)])
        let file = Self.file("seg-000017.mp4", Self.first)
        for bad in [
            Self.clip(id: "..", files: [file]), Self.clip(id: ".hidden", files: [file]), Self.clip(id: "a/b", files: [file]),
            Self.clip(id: "", files: [file]), Self.clip(kind: "crash", files: [file]), Self.clip(files: []),
            Self.clip(files: Array(repeating: file, count: 2)),  // the same name twice
            Self.clip(files: (0...ClientMessage.Clip.maxFiles).map { Self.file("s\($0).mp4", [1]) }),
            Self.clip(files: [.init(name: "../x.mp4", bytes: 1, sha256: file.sha256)]),
            Self.clip(files: [.init(name: ".mp4", bytes: 1, sha256: file.sha256)]),
            Self.clip(files: [.init(name: "clip.json", bytes: 1, sha256: file.sha256)]),
            Self.clip(files: [.init(name: "a.mp4", bytes: 0, sha256: file.sha256)]),
            Self.clip(files: [.init(name: "a.mp4", bytes: StreamSessionStateMachineTests.limits.maxClipFileBytes + 1, sha256: file.sha256)]
            ),
            Self.clip(files: [.init(name: "a.mp4", bytes: 1, sha256: String(repeating: "G", count: 64))]),
            Self.clip(files: [file], at: "2026-11-29T09:00:00.000Z")  // after `to`
        ] {
            let actions = machine.text(ClientMessage.clip(bad).encoded())
            #expect(StreamSessionStateMachineTests.reasons(actions) == [.clip], "\(bad): \(actions)")
        }
        // A GPS track out of range is left out; the clip is still taken.
        let wild = Self.clip(files: [file], gps: [.init(t: "2026-11-29T08:02:30Z", mode: 3, lat: 91, lon: 0)])
        var without = wild
        without.gps = nil
        #expect(machine.text(ClientMessage.clip(wild).encoded()).last == .announceClip(without))
        #expect(machine.isOpen, "a bad clip is told and survived")
    }

    @Test func aPartTakesExactlyTheOneBinaryMessageItAnnounced() {
        var machine = StreamSessionStateMachineTests.opened()
        let part = ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: 65_536, bytes: 3)
        #expect(machine.text(ClientMessage.clipPart(part).encoded()).isEmpty)
        #expect(machine.binary([1, 2, 3]) == [.clipPart(part, Data([1, 2, 3]))])
        #expect(StreamSessionStateMachineTests.reasons(machine.binary([4])) == [.outOfOrder], "a second binary message is not the part's")

        // Fewer or more bytes than it said: refused, and the rest dropped unread.
        _ = machine.text(ClientMessage.clipPart(part).encoded())
        #expect(StreamSessionStateMachineTests.reasons(machine.binary([1, 2])) == [.clip])
        #expect(machine.binary([3]).isEmpty)
        // A text message before its bytes: the part is refused, the text read.
        _ = machine.text(ClientMessage.clipPart(part).encoded())
        let next = machine.text(ClientMessage.clipPart(part).encoded())
        #expect(StreamSessionStateMachineTests.reasons(next) == [.clip])
        #expect(machine.binary([7, 8, 9]) == [.clipPart(part, Data([7, 8, 9]))])

        let limit = StreamSessionStateMachineTests.limits.maxClipFileBytes
        for bad in [
            ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: -1, bytes: 3),
            ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: 0, bytes: 0),
            ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: 0, bytes: 65_537),
            ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: limit - 2, bytes: 3),
            ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: Int.max, bytes: 3),
            ClientMessage.ClipPart(id: "..", name: "a.mp4", offset: 0, bytes: 3),
            ClientMessage.ClipPart(id: "c1", name: "../../a.mp4", offset: 0, bytes: 3)
        ] {
            #expect(StreamSessionStateMachineTests.reasons(machine.text(ClientMessage.clipPart(bad).encoded())) == [.clip], "\(bad)")
            #expect(machine.binary([1, 2, 3]).isEmpty, "its bytes are dropped unread")
        }
        var fresh = StreamSession.StateMachine(limits: StreamSessionStateMachineTests.limits)
        #expect(fresh.text(ClientMessage.clipPart(part).encoded()) == [.close(reason: "first message must be hello")])
    }

    @Test func theMessagesReadBackAsWritten() throws {
        let clip = Self.clip(
            files: [Self.file("a.mp4", [1, 2])], gps: [.init(t: "2026-11-29T08:02:30Z", mode: 3, lat: 37.5, lon: 127, speed: 13.9)])
        #expect(try ClientMessage.decode(ClientMessage.clip(clip).encoded()) == .clip(clip))
        let part = ClientMessage.ClipPart(id: "c1", name: "a.mp4", offset: 5, bytes: 3)
        #expect(try ClientMessage.decode(ClientMessage.clipPart(part).encoded()) == .clipPart(part))
        let have = ServerMessage.ClipHave(id: "c1", files: [.init(name: "a.mp4", have: 2)], stored: true)
        #expect(try ServerMessage.decode(ServerMessage.clipHave(have).encoded()) == .clipHave(have))
        #expect(ServerMessage.clipHave(have).encoded().contains(#""type":"clip_have""#))
        #expect(ServerMessage.ErrorCode(rawValue: "bad_clip") == .badClip)
    }

    // MARK: - The rule

    @Test func whatIsHeldDecidesWhereAPartMayGo() {
        typealias Rule = ClipPartRule
        #expect(Rule.decide(offset: 0, bytes: 10, held: 0, fileBytes: 30) == .append)
        #expect(Rule.decide(offset: 20, bytes: 10, held: 20, fileBytes: 30) == .append)
        #expect(Rule.decide(offset: 20, bytes: 11, held: 20, fileBytes: 30) == .overrun)
        #expect(Rule.decide(offset: 0, bytes: 10, held: 20, fileBytes: 30) == .resume(have: 20), "re-sent: nothing written twice")
        #expect(Rule.decide(offset: 25, bytes: 5, held: 20, fileBytes: 30) == .resume(have: 20), "a gap: never")
        #expect(Rule.decide(offset: 30, bytes: 1, held: 30, fileBytes: 30) == .resume(have: 30), "whole already")
    }

    // MARK: - The store

    /// `clips.retentionDays`: what came before the cutoff goes, whole or not, and a folder an
    /// announce left without its description goes by its own age.
    @Test func clipsOlderThanTheRetentionAreDeleted() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let now = Date()
        let file = Self.file("a.mp4", Self.second)
        _ = try store.announce(Self.clip(id: "old", files: [file]), device: "car-1", now: now.addingTimeInterval(-31 * 86_400))
        _ = try store.announce(Self.clip(id: "new", files: [file]), device: "car-1", now: now.addingTimeInterval(-29 * 86_400))
        _ = try store.announce(Self.clip(id: "other", files: [file]), device: "car-2", now: now.addingTimeInterval(-40 * 86_400))
        let torn = root.appendingPathComponent("car-2/torn")
        try FileManager.default.createDirectory(at: torn, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-35 * 86_400)], ofItemAtPath: torn.path)
        #expect(try store.expire(before: now.addingTimeInterval(-30 * 86_400)) == 3)
        #expect(try store.clips(device: "car-1").map(\.clip.id) == ["new"])
        #expect(try store.clips(device: "car-2").isEmpty && !FileManager.default.fileExists(atPath: torn.path))
        #expect(try store.expire(before: now.addingTimeInterval(-30 * 86_400)) == 0, "a second sweep finds nothing")
    }

    /// A link made while the clip is deleted: either the link is kept and the clip deleted after,
    /// or the clip is gone first and the link refused; never a folder left with only a link in it
    /// (which a clip uploaded again under the same id would bring back to life).
    @Test func aShareAndADeleteAtOnceLeaveNothingBehind() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let file = Self.file("a.mp4", Self.second)
        for round in 0..<30 {
            let id = "race-\(round)"
            _ = try store.announce(Self.clip(id: id, files: [file]), device: "car-1", now: Date())
            DispatchQueue.concurrentPerform(iterations: 8) { index in
                if index == 3 {
                    _ = try? store.delete(device: "car-1", id: id)
                } else {
                    _ = try? store.putShare(ClipShare(id: "\(index)", createdAtMs: 0, expiresAtMs: 1), device: "car-1", id: id)
                }
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("car-1").path).isEmpty)
        #expect(try store.clips(device: "car-1").isEmpty)
    }

    static func store() throws -> (FileClipStore, URL) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("clips-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        return (FileClipStore(root: root.path), root)
    }

    /// Sends `bytes` of `name` from `offset` in parts of at most 64 KiB, as a car does; returns the
    /// last answer.
    static func send(
        _ bytes: [UInt8], name: String, from offset: Int, clip: String = "20261129T080230.822Z",
        to store: FileClipStore, device: String = "car-1"
    ) throws -> ClipAppend {
        var offset = offset
        var last = ClipAppend.refused("nothing sent")
        while offset < bytes.count {
            let end = min(bytes.count, offset + 65_536)
            last = try store.append(
                .init(id: clip, name: name, offset: offset, bytes: end - offset), Data(bytes[offset..<end]), device: device)
            guard case .held(let have) = last, let held = have.files.first?.have, held > offset else { return last }
            offset = held
        }
        return last
    }

    @Test func aClipComesInPartsAndIsStoredOnceEveryFileMatched() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let clip = Self.clip(files: [Self.file("a.mp4", Self.first), Self.file("b.mp4", Self.second)])
        let start = try store.announce(clip, device: "car-1", now: .now)
        #expect(start == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: 0), .init(name: "b.mp4", have: 0)], stored: false)))

        #expect(
            try Self.send(Self.first, name: "a.mp4", from: 0, to: store)
                == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: Self.first.count)], stored: false)))
        #expect(
            try Self.send(Self.second, name: "b.mp4", from: 0, to: store)
                == .held(.init(id: clip.id, files: [.init(name: "b.mp4", have: Self.second.count)], stored: true)))
        let folder = root.appendingPathComponent("car-1/\(clip.id)")
        #expect(try Data(contentsOf: folder.appendingPathComponent("a.mp4")) == Data(Self.first))
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == ["a.mp4", "b.mp4", "clip.json"])
        let listed = try store.clips(device: "car-1")
        #expect(
            listed.count == 1 && listed[0].isStored && listed[0].clip == clip && listed[0].have == [Self.first.count, Self.second.count])
        #expect(try store.clips(device: "car-2").isEmpty, "another car's clips are not this one's")
        // Announced again (a new session): nothing left to send.
        #expect(try store.announce(clip, device: "car-1", now: .now).answer?.stored == true)
        // Described otherwise once stored (a stolen car's other video under its id): refused, and
        // what was stored (and may be shared) stays as it came.
        let forged = Self.clip(kind: "parking", files: [Self.file("a.mp4", Self.second)], at: "2025-01-01T00:00:00.000Z")
        guard case .refused(let why) = try store.announce(forged, device: "car-1", now: .now) else {
            Issue.record("a stored clip replaced"); return
        }
        #expect(why.contains("not replaced"))
        #expect(try store.clip(device: "car-1", id: clip.id)?.clip == clip)
        #expect(try Data(contentsOf: folder.appendingPathComponent("a.mp4")) == Data(Self.first))
        #expect(try store.delete(device: "car-1", id: clip.id))
        #expect(try store.clips(device: "car-1").isEmpty && !FileManager.default.fileExists(atPath: folder.path))
        #expect(try !store.delete(device: "car-1", id: clip.id))
        #expect(try !store.delete(device: "car-1", id: ".."), "no id that leaves the device's folder")
    }

    @Test func aDroppedLinkResumesFromWhatReachedTheDisk() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let clip = Self.clip(files: [Self.file("a.mp4", Self.first)])
        _ = try store.announce(clip, device: "car-1", now: .now)
        // Two parts, then the link dies (the car never heard the second answer).
        _ = try store.append(.init(id: clip.id, name: "a.mp4", offset: 0, bytes: 65_536), Data(Self.first[0..<65_536]), device: "car-1")
        _ = try store.append(
            .init(id: clip.id, name: "a.mp4", offset: 65_536, bytes: 65_536), Data(Self.first[65_536..<131_072]), device: "car-1")
        // A server killed in a write leaves a shorter prefix of the car's bytes.
        let part = root.appendingPathComponent("car-1/\(clip.id)/a.mp4.part")
        let handle = try FileHandle(forWritingTo: part)
        try handle.truncate(atOffset: 100_000)
        try handle.close()
        // The new session's announce says where to go on from; a part re-sent from where the car
        // last heard is not written twice.
        #expect(try store.announce(clip, device: "car-1", now: .now).answer?.files == [.init(name: "a.mp4", have: 100_000)])
        #expect(
            try store.append(
                .init(id: clip.id, name: "a.mp4", offset: 65_536, bytes: 65_536), Data(Self.first[65_536..<131_072]), device: "car-1")
                == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: 100_000)], stored: false)))
        #expect(
            try Self.send(Self.first, name: "a.mp4", from: 100_000, to: store)
                == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: Self.first.count)], stored: true)))
        #expect(try Data(contentsOf: root.appendingPathComponent("car-1/\(clip.id)/a.mp4")) == Data(Self.first))
    }

    @Test func aFileThatDoesNotMatchItsSHA256IsDroppedAndSentAgain() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let clip = Self.clip(files: [Self.file("a.mp4", Self.second)])
        _ = try store.announce(clip, device: "car-1", now: .now)
        var wrong = Self.second
        wrong[70_000 - 1] ^= 0xff
        #expect(
            try Self.send(wrong, name: "a.mp4", from: 0, to: store)
                == .mismatch(.init(id: clip.id, files: [.init(name: "a.mp4", have: 0)], stored: false)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("car-1/\(clip.id)").path) == ["clip.json"])
        #expect(
            try Self.send(Self.second, name: "a.mp4", from: 0, to: store)
                == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: Self.second.count)], stored: true)))
    }

    @Test func aFileWhoseCheckACrashCutShortIsCheckedAtTheNextAnnounce() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let clip = Self.clip(files: [Self.file("a.mp4", Self.second)])
        _ = try store.announce(clip, device: "car-1", now: .now)
        // Every byte on disk, not yet checked or renamed: a kill between the two.
        try Data(Self.second).write(to: root.appendingPathComponent("car-1/\(clip.id)/a.mp4.part"))
        #expect(
            try store.announce(clip, device: "car-1", now: .now)
                == .held(.init(id: clip.id, files: [.init(name: "a.mp4", have: Self.second.count)], stored: true)))
        // Or a part, if the car's part comes first.
        let again = Self.clip(id: "c2", files: [Self.file("a.mp4", Self.second)])
        _ = try store.announce(again, device: "car-1", now: .now)
        try Data(Self.second).write(to: root.appendingPathComponent("car-1/c2/a.mp4.part"))
        #expect(
            try store.append(.init(id: "c2", name: "a.mp4", offset: 0, bytes: 10), Data(Self.second[0..<10]), device: "car-1")
                == .held(.init(id: "c2", files: [.init(name: "a.mp4", have: Self.second.count)], stored: true)))
    }

    @Test func aCarsClipsStayWithinItsShareOfTheStore() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("clips-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = FileClipStore(root: root.path, maxBytesPerDevice: 250_000)
        let first = Self.clip(id: "c1", files: [Self.file("a.mp4", Self.first)])  // 200 000
        let second = Self.clip(id: "c2", files: [Self.file("b.mp4", Self.second)])  // 70 000
        #expect(try store.announce(first, device: "car-1", now: .now).answer != nil)
        #expect(
            try store.announce(second, device: "car-1", now: .now)
                == .refused("clip c2: its 70000 bytes and the 200000 this car keeps already are more than its 250000"))
        #expect(try store.announce(first, device: "car-1", now: .now).answer != nil, "announced again, it does not count twice")
        #expect(try store.announce(second, device: "car-2", now: .now).answer != nil, "each car has its own share")
        #expect(try store.delete(device: "car-1", id: "c1"))
        #expect(try store.announce(second, device: "car-1", now: .now).answer != nil, "room again once the owner deletes one")
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("car-1/c1").path))
    }

    @Test func whatTheCarDescribesAnewIsHeldAnewAndNothingElseIsTaken() throws {
        let (store, root) = try Self.store()
        defer { try? FileManager.default.removeItem(at: root) }
        let clip = Self.clip(files: [Self.file("a.mp4", Self.first)])
        _ = try store.announce(clip, device: "car-1", now: .now)
        _ = try store.append(.init(id: clip.id, name: "a.mp4", offset: 0, bytes: 100), Data(Self.first[0..<100]), device: "car-1")
        // The same name with other bytes: another file.
        let changed = Self.clip(files: [Self.file("a.mp4", Self.second)])
        #expect(try store.announce(changed, device: "car-1", now: .now).answer?.files == [.init(name: "a.mp4", have: 0)])
        // Parts of files or clips never announced, or past a file's end, are refused.
        #expect(
            try store.append(.init(id: clip.id, name: "z.mp4", offset: 0, bytes: 1), Data([1]), device: "car-1")
                == .refused("clip \(clip.id) file z.mp4 was not announced"))
        #expect(
            try store.append(.init(id: "other", name: "a.mp4", offset: 0, bytes: 1), Data([1]), device: "car-1")
                == .refused("clip other file a.mp4 was not announced"))
        #expect(
            try store.append(.init(id: clip.id, name: "a.mp4", offset: 0, bytes: 1), Data([1]), device: "car-2")
                == .refused("clip \(clip.id) file a.mp4 was not announced"), "another car cannot write into this one's clip")
        _ = try store.append(.init(id: clip.id, name: "a.mp4", offset: 0, bytes: 65_536), Data(Self.second[0..<65_536]), device: "car-1")
        guard
            case .refused = try store.append(
                .init(id: clip.id, name: "a.mp4", offset: 65_536, bytes: 65_536), Data(count: 65_536), device: "car-1")
        else {
            Issue.record("a part past the file's end was taken")
            return
        }
        // A device whose name is a path's part stays inside the store's folder.
        _ = try store.announce(clip, device: "..", now: .now)
        #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("_../\(clip.id)/clip.json").path))
    }
}

extension ClipAppend {
    /// The answer, if the store took the message.
    var answer: ServerMessage.ClipHave? { if case .held(let have) = self { have } else { nil } }
}

/// The owner's share of the store, as a rule on numbers (``ClipQuota``).
@Suite struct ClipQuotaTests {
    @Test func aClipFitsTheOwnersShareOrIsRefusedSayingWhy() {
        let file = ClipUploadTests.file("a.mp4", [UInt8](repeating: 1, count: 300))
        let held = [
            StoredClip(device: "car-a", clip: ClipUploadTests.clip(id: "old", files: [file]), receivedAt: "", have: [300]),
            StoredClip(device: "car-b", clip: ClipUploadTests.clip(id: "new", files: [file]), receivedAt: "", have: [0])
        ]
        let new = ClipUploadTests.clip(id: "new", files: [file])
        #expect(ClipQuota.refusal(new, device: "car-b", held: held, limitBytes: 600) == nil, "its own earlier announce is not counted")
        #expect(
            ClipQuota.refusal(new, device: "car-c", held: held, limitBytes: 600)?.contains("600") == true,
            "another car's clip of that id is")
        #expect(ClipQuota.refusal(ClipUploadTests.clip(id: "third", files: [file]), device: "car-a", held: held, limitBytes: 899) != nil)
        #expect(ClipQuota.refusal(ClipUploadTests.clip(id: "third", files: [file]), device: "car-a", held: held, limitBytes: 900) == nil)
    }
}
