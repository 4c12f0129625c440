import Foundation
import GuidanceProtocol

/// What the clips of one owner's cars may take of the store (`clips.maxMegabytesPerOwner`),
/// beside each car's own share (`clips.maxMegabytesPerCar`, the store's). A clip past it is
/// refused when announced (bad_clip): the car keeps it in custody and offers it again on its next
/// session, so it arrives once the owner has deleted older events or retention has.
///
/// The count and the announce are one step under the owner's lock in the store
/// (``ClipStore/withOwnerLock(_:_:)``): two cars of one owner announcing at once, at one
/// instance or two, cannot both fit in the room of one.
enum ClipQuota {
    /// Whose room a car's clip takes, looked up when it is announced.
    enum Admission: Sendable, Equatable {
        /// A car on a static token: no owner, only its own share.
        case unlimited
        case owner(Share)
        /// A car that is no longer paired: nothing is taken from it.
        case refused(String)
    }

    struct Share: Sendable, Equatable {
        var owner: Int64
        /// Every car of the owner, this one included.
        var cars: [String]
        var limitBytes: Int
    }

    /// The owner's share for a paired car's session, asked of the pairing store.
    static func admission(device: String, owners: any PairingStore & OwnerStore, limitBytes: Int) async throws -> Admission {
        guard let owner = try await owners.pairedDevice(device)?.owner else {
            return .refused("this car is not paired to an owner any more; its clips are not taken")
        }
        return .owner(Share(owner: owner, cars: try await owners.devices(owner: owner).map(\.device), limitBytes: limitBytes))
    }

    /// Announces `clip` in `store` if it fits the owner's share: counted and kept in one step.
    /// Runs on the blocking pool (it reads every clip of the owner's cars).
    static func announce(
        _ clip: ClientMessage.Clip, device: String, admission: Admission, store: any ClipStore,
        now: Date
    ) throws -> ClipAppend {
        switch admission {
        case .unlimited:
            return try store.announce(clip, device: device, now: now)
        case .refused(let why):
            return .refused("clip \(clip.id): \(why)")
        case .owner(let share):
            return try store.withOwnerLock(share.owner) {
                let held = try share.cars.flatMap { try store.clips(device: $0) }
                if let refusal = refusal(clip, device: device, held: held, limitBytes: share.limitBytes) { return .refused(refusal) }
                return try store.announce(clip, device: device, now: now)
            }
        }
    }

    /// Why `clip` does not fit, or nil: the announced sizes of every other clip the owner's cars
    /// keep, plus this one's, against `limitBytes`. (Each file ≤ `clips.maxFileMegabytes` and at
    /// most 48 a clip: the sums cannot overflow.)
    static func refusal(_ clip: ClientMessage.Clip, device: String, held: [StoredClip], limitBytes: Int) -> String? {
        let others = held.filter { !($0.device == device && $0.clip.id == clip.id) }.reduce(0) { $0 + bytes($1.clip) }
        let needed = bytes(clip)
        guard others + needed > limitBytes else { return nil }
        return
            "clip \(clip.id): its \(needed) bytes and the \(others) the owner's cars keep already are more than the owner's \(limitBytes) (clips.maxMegabytesPerOwner)"
    }

    static func bytes(_ clip: ClientMessage.Clip) -> Int { clip.files.reduce(0) { $0 + $1.bytes } }
}
