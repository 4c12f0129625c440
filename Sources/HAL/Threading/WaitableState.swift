internal import Glibc
// `timespec` can be owned by whichever C module first includes <time.h>; here that is CV4L2.
internal import CV4L2

/// State behind a mutex, with a condition variable for threads that sleep until it changes.
///
/// The one lock of the agent's own threads (capture, speech, haptics, network changes): they
/// block in C (V4L2, FFmpeg, eSpeak-ng, ALSA, libgpiod, netlink) and so live outside Swift's
/// cooperative pool, where `Mutex` alone cannot make a thread wait. Timed waits count on
/// `CLOCK_MONOTONIC`, so a change of the wall clock never shortens or stretches one.
public final class WaitableState<State>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state: State

    public init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }

    /// Sleeps until `ready` holds, then runs `body` with the lock still held.
    public func wait<Result>(until ready: (State) -> Bool, then body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) { pthread_cond_wait(condition, mutex) }
        return try body(&state)
    }

    /// Sleeps until `ready` holds or `deadline` (`CLOCK_MONOTONIC` nanoseconds, as
    /// `MonotonicClock.now()`) passes, then runs `body` with the lock still held and whether
    /// `ready` held.
    public func wait<Result>(
        until ready: (State) -> Bool, deadline: UInt64, then body: (inout State, _ ready: Bool) throws -> Result
    ) rethrows -> Result {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) {
            if pthread_cond_timedwait(condition, mutex, &time) == ETIMEDOUT { break }
        }
        return try body(&state, ready(state))
    }

    /// Changes the state and wakes every waiting thread.
    public func update<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return try body(&state)
    }
}
