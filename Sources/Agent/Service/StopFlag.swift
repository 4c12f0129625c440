import Synchronization

/// Set once, read from any thread: a loop on a thread of its own ends when it is set.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .releasing) }
    var value: Bool { flag.load(ordering: .acquiring) }
}
