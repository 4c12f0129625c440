internal import Glibc

/// State behind a mutex, with a condition variable for threads that sleep until it changes.
///
/// For the speech threads, which block in C (eSpeak-ng, ALSA) and so live outside Swift's
/// cooperative pool, where `Mutex` alone cannot make a thread wait.
final class ConditionLock<State>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state: State

    init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }

    /// Sleeps until `ready` holds, then runs `body` with the lock still held.
    func wait<Result>(until ready: (State) -> Bool, then body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) { pthread_cond_wait(condition, mutex) }
        return try body(&state)
    }

    /// Changes the state and wakes every waiting thread.
    func update<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return try body(&state)
    }
}

/// Starts a joinable thread named `name` (as `top` and `/proc` show it) that runs `body`.
/// Returns the error number of `pthread_create` if it fails.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Result<pthread_t, ThreadStartError> {
    final class Box {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    let context = Unmanaged.passRetained(Box(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let created = pthread_create(&thread, nil, { context in
        guard let context else { return nil }
        let box = Unmanaged<Box>.fromOpaque(context).takeRetainedValue()
        nameThread(box.name)
        box.body()
        return nil
    }, context)
    guard created == 0 else {
        Unmanaged<Box>.fromOpaque(context).release()
        return .failure(ThreadStartError(code: created))
    }
    return .success(thread)
}

/// `pthread_setname_np` needs `_GNU_SOURCE`, which Glibc's module map does not set.
private func nameThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    // The kernel keeps 15 bytes of a thread's name.
    _ = Array(name.utf8.prefix(15)).withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count) }
    _ = close(fd)
}

struct ThreadStartError: Error {
    let code: Int32
}
