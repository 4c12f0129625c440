public import Foundation
public import GuidanceProtocol

/// Where the server keeps the clips cars upload for their owners. ``FileClipStore`` keeps them
/// in a folder; a fleet whose instances share no disk adds an object store behind the same calls.
///
/// Every call blocks on storage: callers run it off the event loop.
public protocol ClipStore: Sendable {
    /// Keeps the clip's description (the newest one sent wins) and says how much of each of its
    /// files is held (`.held`). A file the car now describes differently (size or SHA-256) is held
    /// from 0. A clip that would take the car past its share of the store is `.refused`, and so is
    /// another description of a clip stored whole (stored evidence is never replaced).
    func announce(_ clip: ClientMessage.Clip, device: String, now: Date) throws -> ClipAppend
    /// Appends a part's bytes if its offset is what is held (``ClipPartRule``); a file whose last
    /// byte came is checked against its SHA-256 and stored, or dropped.
    func append(_ part: ClientMessage.ClipPart, _ bytes: Data, device: String) throws -> ClipAppend
    /// The device's clips, newest first.
    func clips(device: String) throws -> [StoredClip]
    /// One clip of the device, if it is kept.
    func clip(device: String, id: String) throws -> StoredClip?
    /// Deletes a clip and its files; false if there was none.
    func delete(device: String, id: String) throws -> Bool
    /// The clip's share links, newest first; none for a clip that has none (or does not exist).
    func shares(device: String, id: String) throws -> [ClipShare]
    /// Keeps a share link's record, new or changed (revoked); false if the clip does not exist.
    func putShare(_ share: ClipShare, device: String, id: String) throws -> Bool
    /// Where a stored file of a clip is on this machine, to serve it from; nil if it is not
    /// stored whole (or the store keeps no files here).
    func path(device: String, id: String, name: String) -> String?
    /// Deletes every clip whose description last came before `cutoff` (`clips.retentionDays`),
    /// whole or not; returns how many. Several instances may sweep one store at once.
    func expire(before cutoff: Date) throws -> Int
    /// Runs `body` alone among the callers naming this owner, on every instance sharing the
    /// store: what an owner's cars keep is counted and a clip added to it in one step (``ClipQuota``).
    func withOwnerLock<T>(_ owner: Int64, _ body: () throws -> T) throws -> T
    /// Marks the clip as told to its owner (``ImpactMail``): true only for the one call that made
    /// the mark, of every session, restart and instance sharing the store; false once it exists,
    /// or when the clip is not kept.
    func claimNotice(device: String, id: String) throws -> Bool
}

/// What became of a `clip_part`.
public enum ClipAppend: Sendable, Equatable {
    /// What is held of the part's file now (and whether the whole clip is stored): the answer.
    case held(ServerMessage.ClipHave)
    /// The part names no clip or file announced on this server, or reaches past its file; or the
    /// clip would take the car past its share of the store.
    case refused(String)
    /// The file's bytes are all in and their SHA-256 is not the one announced: dropped, held from 0
    /// (the answer says so, and the car sends the file again).
    case mismatch(ServerMessage.ClipHave)
}

/// A link an owner made to show one clip to someone without an account (an insurer): signed
/// (``ShareLinks``), and good until it expires or is revoked.
public struct ClipShare: Codable, Sendable, Equatable {
    /// 16 random hex digits: which link of the clip.
    public var id: String
    public var createdAtMs: Int64
    public var expiresAtMs: Int64
    public var revoked: Bool = false

    public func isLive(nowMs: Int64) -> Bool { !revoked && nowMs < expiresAtMs }
}

/// A clip as the store holds it.
public struct StoredClip: Sendable, Equatable, Codable {
    public var device: String
    public var clip: ClientMessage.Clip
    /// When its description last came, RFC 3339.
    public var receivedAt: String
    /// Bytes held of each file, in the clip's order.
    public var have: [Int]

    /// Every file is in and matched its SHA-256.
    public var isStored: Bool { zip(clip.files, have).allSatisfy { $0.bytes == $1 } }
}

/// The rule for a part, with nothing but numbers: what the store holds decides, not the part.
public enum ClipPartRule {
    public enum Decision: Sendable, Equatable {
        /// Append it: it starts where the file's bytes end and stays within the file.
        case append
        /// Not where the held bytes end (a re-sent or stale part): nothing is written; the car
        /// hears what is held and goes on from there.
        case resume(have: Int)
        /// It reaches past the file's announced size.
        case overrun
    }

    public static func decide(offset: Int, bytes: Int, held: Int, fileBytes: Int) -> Decision {
        guard held < fileBytes, offset == held else { return .resume(have: held) }
        // offset == held < fileBytes ≤ the store's limit, bytes ≤ 64 KiB: no overflow.
        return offset + bytes <= fileBytes ? .append : .overrun
    }
}
