import Logging
import NIOCore
import Synchronization

/// The bytes of segments being received, server-wide, against `server.maxInFlightMegabytes`.
///
/// A session takes room for a segment's announced `bytes` when its header is accepted, before it
/// reads a chunk, and gives it back once the segment is acknowledged or refused. When the room is
/// spent, the session waits here, first come first served, and reads nothing meanwhile: its
/// connection's ``ReadCredit`` stops reading the socket, so the car's bytes wait in the network,
/// not in the server's memory. A reconnecting fleet is a queue, then, not a heap.
///
/// Room is taken whole: a session that holds room for its segment can always read the rest of it.
/// (Taking it chunk by chunk would let every session hold half a segment and none finish.)
final class InFlightBudget: Sendable {
    /// Bytes that may be in flight at once.
    let capacity: Int

    private struct Waiter {
        let id: Int
        let bytes: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var available: Int
        var waiters = CircularBuffer<Waiter>()
        var nextID = 0
    }

    private let state: Mutex<State>
    private let metrics: ServerMetrics?
    /// Where a wait is told (at most a line a second): the operator's sign that the budget is spent.
    private let logger: Logger?
    private let waits = LogLimit()

    init(capacity: Int, metrics: ServerMetrics? = nil, logger: Logger? = nil) {
        precondition(capacity > 0, "an in-flight budget needs room")
        self.capacity = capacity
        self.metrics = metrics
        self.logger = logger
        state = Mutex(State(available: capacity))
    }

    /// Bytes taken now.
    var inFlight: Int { capacity - state.withLock { $0.available } }
    /// Takers waiting for room.
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Tells the metrics what is taken and who waits, from one look at the state.
    private func report() {
        guard let metrics else { return }
        let (bytes, waiting) = state.withLock { (capacity - $0.available, $0.waiters.count) }
        metrics.inFlight(bytes: bytes, waiting: waiting)
    }

    /// Takes room for `bytes` (at most the whole budget: a segment larger than it goes alone),
    /// waiting for it behind the takers that came first. Returns the bytes taken, which the caller
    /// gives back with ``release(_:)``. Cancelled while waiting, it takes nothing and throws.
    func reserve(_ bytes: Int) async throws -> Int {
        let wanted = min(max(bytes, 0), capacity)
        let id: Int? = state.withLock { state in
            if state.waiters.isEmpty, state.available >= wanted {
                state.available -= wanted
                return nil
            }
            defer { state.nextID += 1 }
            return state.nextID
        }
        guard let id else {
            report()
            return wanted
        }
        metrics?.waitedForRoom()
        if let logger {
            waits.log(
                logger, .notice,
                "\(inFlight >> 20) MiB of segments are being received (server.maxInFlightMegabytes: \(capacity >> 20)); "
                    + "\(waiting + 1) session(s) wait for room, reading nothing meanwhile")
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Now { case wait, admitted, cancelled }
                let now: Now = state.withLock { state in
                    // Cancelled before it waited: the cancellation's handler found no waiter to end.
                    if Task.isCancelled { return .cancelled }
                    // Room may have come back between the first look and now.
                    if state.waiters.isEmpty, state.available >= wanted {
                        state.available -= wanted
                        return .admitted
                    }
                    state.waiters.append(Waiter(id: id, bytes: wanted, continuation: continuation))
                    return .wait
                }
                switch now {
                case .wait: break
                case .admitted: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                }
                report()
            }
        } onCancel: {
            let cancelled: CheckedContinuation<Void, any Error>? = state.withLock { state in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            cancelled?.resume(throwing: CancellationError())
            // The one behind it may fit now.
            release(0)
        }
        return wanted
    }

    /// Gives back `bytes` taken with ``reserve(_:)`` and lets in the waiters that now fit, in order.
    func release(_ bytes: Int) {
        let admitted: [CheckedContinuation<Void, any Error>] = state.withLock { state in
            state.available = min(capacity, state.available + max(bytes, 0))
            var admitted: [CheckedContinuation<Void, any Error>] = []
            while let first = state.waiters.first, first.bytes <= state.available {
                state.available -= first.bytes
                admitted.append(state.waiters.removeFirst().continuation)
            }
            return admitted
        }
        for continuation in admitted { continuation.resume() }
        report()
    }
}
