import GuidanceProtocol
import NIOPosix

/// What the clips of one owner's cars may take of the store (`clips.maxMegabytesPerOwner`),
/// beside each car's own share (`clips.maxMegabytesPerCar`, the store's). A clip past it is
/// refused when announced (bad_clip): the car keeps it in custody and offers it again on its next
/// session, so it arrives once the owner has deleted older events or retention has.
enum ClipQuota {
    /// Why `clip` does not fit, or nil: the announced sizes of every other clip the owner's cars
    /// keep, plus this one's, against `limitBytes`. (Each file ≤ `clips.maxFileMegabytes` and at
    /// most 48 a clip: the sums cannot overflow.)
    static func refusal(_ clip: ClientMessage.Clip, device: String, held: [StoredClip], limitBytes: Int) -> String? {
        let others = held.filter { !($0.device == device && $0.clip.id == clip.id) }.reduce(0) { $0 + bytes($1.clip) }
        let needed = bytes(clip)
        guard others + needed > limitBytes else { return nil }
        return "clip \(clip.id): its \(needed) bytes and the \(others) the owner's cars keep already are more than the owner's \(limitBytes) (clips.maxMegabytesPerOwner)"
    }

    /// The same for a car's clip, looking its owner's cars up; nil for a car without an owner.
    static func refusal(_ clip: ClientMessage.Clip, device: String, owners: any PairingStore & OwnerStore, store: any ClipStore,
                        limitBytes: Int) async throws -> String? {
        guard let owner = try await owners.pairedDevice(device)?.owner else { return nil }
        let held = try await self.held(owner: owner, owners: owners, store: store)
        return refusal(clip, device: device, held: held, limitBytes: limitBytes)
    }

    /// Every clip the owner's cars keep, read on the blocking pool.
    static func held(owner: Int64, owners: any OwnerStore, store: any ClipStore) async throws -> [StoredClip] {
        let cars = try await owners.devices(owner: owner).map(\.device)
        return try await NIOThreadPool.singleton.runIfActive { try cars.flatMap { try store.clips(device: $0) } }
    }

    static func bytes(_ clip: ClientMessage.Clip) -> Int { clip.files.reduce(0) { $0 + $1.bytes } }
}
