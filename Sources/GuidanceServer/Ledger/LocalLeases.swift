import Synchronization

/// Leases for one server alone, in memory: each acquire gives the device a higher epoch and tells
/// the session that held it, on ``superseded``.
public final class LocalLeases: SessionLeases {
    private struct Holder {
        var session: String
        var epoch: Int64
    }

    private let holders = Mutex<[String: Holder]>([:])
    private let epochs = Mutex<[String: Int64]>([:])
    public let superseded: AsyncStream<SupersededSession>
    private let continuation: AsyncStream<SupersededSession>.Continuation

    public init() {
        (superseded, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    deinit { continuation.finish() }

    public func acquire(device: String, session: String) async throws -> Int64 {
        let (epoch, previous) = holders.withLock { holders in
            let epoch = epochs.withLock { epochs in
                let next = (epochs[device] ?? 0) + 1
                epochs[device] = next
                return next
            }
            let previous = holders.updateValue(Holder(session: session, epoch: epoch), forKey: device)
            return (epoch, previous)
        }
        if let previous, previous.session != session {
            continuation.yield(SupersededSession(device: device, session: previous.session, byEpoch: epoch))
        }
        return epoch
    }

    public func release(device: String, session: String, epoch: Int64) async throws {
        holders.withLock { holders in
            if let holder = holders[device], holder.session == session, holder.epoch == epoch { holders[device] = nil }
        }
    }
}
