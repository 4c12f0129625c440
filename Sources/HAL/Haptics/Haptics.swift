internal import Glibc
// timespec is owned by CV4L2 (the first C module to include <time.h>); importing it names the type.
internal import CV4L2
public import Logging

/// Plays ``HapticPattern``s on a ``HapticLine``: what the agent calls when guidance arrives.
///
/// Patterns are played on a thread of the player's own, which waits for each edge with an
/// absolute `CLOCK_MONOTONIC` deadline (`pthread_cond_timedwait`: the kernel's high-resolution
/// timer, like `clock_nanosleep`, but a newer pattern wakes it at once). The cooperative pool
/// could be busy with the encoder and the uplink when a pulse should end; this thread is not.
///
/// - Important: The player owns its line from ``init(line:logger:latencyHistory:onLatency:)``
///   on: the line is driven inactive there and released by ``close()``, by `deinit`, when the
///   initializer throws, or when the line keeps failing. No error from the line reaches the
///   caller after the initializer: it is logged, the line is driven inactive if it can be, and
///   released if that fails too or if three patterns in a row fail.
public final class Haptics: Sendable {
    private let worker: HapticsWorker

    /// Drives `line` inactive and starts the thread.
    ///
    /// - Parameters:
    ///   - latencyHistory: How many of the latest latencies ``recentLatencies`` keeps.
    ///   - onLatency: Called on the player's thread with each pattern's latency, from the time
    ///     it was received to the moment its first pulse set the line active. Keep it short.
    /// - Throws: The line's error if it cannot be driven inactive, or ``HapticsError`` if the
    ///   thread cannot start; the line is released either way.
    public init(line: any HapticLine, logger: Logger, latencyHistory: Int = 256,
                onLatency: (@Sendable (_ latency: Duration, _ pattern: HapticPattern) -> Void)? = nil) throws {
        do {
            try line.setActive(false)
        } catch {
            line.release()
            throw error
        }
        worker = HapticsWorker(line: line, logger: logger, latencyHistory: max(1, latencyHistory), onLatency: onLatency)
        do {
            try worker.start()
        } catch {
            line.release()
            throw error
        }
        logger.debug("haptics: ready on \(line)")
    }

    deinit { worker.close() }

    /// The line, for logs.
    public var lineDescription: String { worker.line.description }

    /// Starts `pattern` and returns at once. A pattern still playing is cut short first: its
    /// line goes inactive, then the new one starts. Does nothing after ``close()`` or once the
    /// line was released after errors (see ``isReleased``).
    ///
    /// - Parameter receivedAt: When the event that asks for the pattern arrived; the latency to
    ///   the first pulse is measured from it.
    public func play(_ pattern: HapticPattern, receivedAt: ContinuousClock.Instant = .now) {
        worker.play(HapticsWorker.Request(pattern: pattern, receivedAt: receivedAt))
    }

    /// The latest latencies, oldest first: from `receivedAt` to the moment the first pulse set
    /// the line active (after the line reported it done).
    public var recentLatencies: [Duration] { worker.recentLatencies }

    /// The line was released, by ``close()`` or after errors; ``play(_:receivedAt:)`` does nothing.
    public var isReleased: Bool { worker.isReleased }

    /// Stops the pattern playing, drives the line inactive, releases it and ends the thread.
    /// Returns when that is done (called from ``init(line:logger:latencyHistory:onLatency:)``'s
    /// `onLatency`, it returns at once and the thread finishes the job). Safe to call twice.
    public func close() { worker.close() }
}

/// The thread and what it shares with callers. `state` is guarded by `mutex`; `cond` tells the
/// thread about a new request or a stop.
private final class HapticsWorker: @unchecked Sendable {
    struct Request {
        var pattern: HapticPattern
        var receivedAt: ContinuousClock.Instant
    }

    private struct State {
        var pending: Request?
        var stopping = false
        var closed = false
        /// The thread released the line after errors and ended.
        var failed = false
        var thread: pthread_t?
        var latencies: [Duration] = []
    }

    private enum Outcome {
        case finished
        case interrupted
        case failed
        case gaveUp
    }

    /// Patterns that fail in a row (each time the line could still be driven inactive) before
    /// the line is given up.
    static let failuresBeforeRelease = 3

    let line: any HapticLine
    private let logger: Logger
    private let latencyHistory: Int
    private let onLatency: (@Sendable (Duration, HapticPattern) -> Void)?
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>
    private var state = State()

    init(line: any HapticLine, logger: Logger, latencyHistory: Int, onLatency: (@Sendable (Duration, HapticPattern) -> Void)?) {
        self.line = line
        self.logger = logger
        self.latencyHistory = latencyHistory
        self.onLatency = onLatency
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        cond = .allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    private func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    // MARK: - Callers

    func play(_ request: Request) {
        let (accepted, replaced) = withLock { () -> (Bool, Request?) in
            guard !state.closed, !state.failed else { return (false, nil) }
            defer {
                state.pending = request
                pthread_cond_signal(cond)
            }
            return (true, state.pending)
        }
        if !accepted {
            logger.debug("haptics: \(request.pattern) not played: the line was released")
        } else if let replaced {
            logger.debug("haptics: \(replaced.pattern) replaced by \(request.pattern) before it started")
        }
    }

    var recentLatencies: [Duration] { withLock { state.latencies } }

    var isReleased: Bool { withLock { state.closed || state.failed } }

    func close() {
        let (first, thread) = withLock { () -> (Bool, pthread_t?) in
            guard !state.closed else { return (false, nil) }
            state.closed = true
            state.stopping = true
            state.pending = nil
            pthread_cond_signal(cond)
            defer { state.thread = nil }
            return (true, state.thread)
        }
        guard first else { return }
        if let thread, pthread_equal(thread, pthread_self()) != 0 {
            // From the thread itself (a callback): it stops the pattern and releases the line
            // as it ends.
            pthread_detach(thread)
            return
        }
        if let thread { pthread_join(thread, nil) }
        line.release()
        logger.debug("haptics: closed; \(line) released")
    }

    func start() throws {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            guard let context else { return nil }
            Unmanaged<HapticsWorker>.fromOpaque(context).takeRetainedValue().run()
            return nil
        }, context)
        guard created == 0 else {
            Unmanaged<HapticsWorker>.fromOpaque(context).release()
            withLock { state.closed = true }
            throw HapticsError.thread(created)
        }
        withLock { state.thread = thread }
    }

    // MARK: - The thread

    private func run() {
        Self.nameThread("haptics")
        var failures = 0
        while let request = next() {
            switch perform(request) {
            case .finished:
                failures = 0
            case .interrupted:
                break
            case .failed:
                failures += 1
                guard failures >= Self.failuresBeforeRelease else { continue }
                logger.error("haptics: \(failures) patterns in a row failed on \(line); releasing it, haptics are off until restart")
                giveUp()
                return
            case .gaveUp:
                logger.error("haptics: \(line) cannot be driven inactive; releasing it, haptics are off until restart")
                giveUp()
                return
            }
        }
        line.release()
    }

    private func giveUp() {
        line.release()
        withLock {
            state.failed = true
            state.pending = nil
        }
    }

    /// The next request; nil when the player is stopping.
    private func next() -> Request? {
        withLock {
            while state.pending == nil && !state.stopping { pthread_cond_wait(cond, mutex) }
            guard !state.stopping else { return nil }
            defer { state.pending = nil }
            return state.pending
        }
    }

    /// Waits until `deadline` (`CLOCK_MONOTONIC`, ns); true if a new request or a stop came first.
    private func wait(until deadline: UInt64) -> Bool {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return withLock {
            while state.pending == nil && !state.stopping {
                if pthread_cond_timedwait(cond, mutex, &time) == ETIMEDOUT { break }
            }
            return state.pending != nil || state.stopping
        }
    }

    /// Each pulse: active, wait its time, inactive, wait the gap if another pulse follows. Every
    /// wait counts from the moment the line reported the edge done, so a late wake-up shifts
    /// the rest of the pattern but never shortens a pulse or a gap.
    private func perform(_ request: Request) -> Outcome {
        let pattern = request.pattern
        let steps = pattern.milliseconds
        var index = 0
        while index < steps.count {
            do {
                try line.setActive(true)
            } catch {
                return failed(pattern, error)
            }
            let edge = MonotonicClock.now()
            if index == 0 { record(ContinuousClock.now - request.receivedAt, pattern) }
            let interrupted = wait(until: edge + UInt64(steps[index]) * 1_000_000)
            do {
                try line.setActive(false)
            } catch {
                return failed(pattern, error)
            }
            if interrupted {
                logger.debug("haptics: \(pattern) cut short")
                return .interrupted
            }
            index += 1
            if index + 1 < steps.count, wait(until: MonotonicClock.now() + UInt64(steps[index]) * 1_000_000) {
                logger.debug("haptics: \(pattern) cut short")
                return .interrupted
            }
            index += 1
        }
        return .finished
    }

    private func failed(_ pattern: HapticPattern, _ error: any Error) -> Outcome {
        logger.error("haptics: \(pattern) stopped: \(error)")
        do {
            try line.setActive(false)
        } catch {
            logger.error("haptics: \(error)")
            return .gaveUp
        }
        return .failed
    }

    private func record(_ latency: Duration, _ pattern: HapticPattern) {
        withLock {
            if state.latencies.count >= latencyHistory { state.latencies.removeFirst(state.latencies.count - latencyHistory + 1) }
            state.latencies.append(latency)
        }
        logger.debug("haptics: \(pattern) on \(Self.milliseconds(latency)) after it was received")
        onLatency?(latency, pattern)
    }

    /// `1.234 ms`.
    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        let sign = microseconds < 0 ? "-" : ""
        let magnitude = microseconds.magnitude
        let fraction = String(magnitude % 1000)
        return "\(sign)\(magnitude / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction) ms"
    }

    /// Shows as `haptics` in `top -H` and `/proc/PID/task/*/comm`.
    private static func nameThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = name.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
        _ = Glibc.close(fd)
    }
}
