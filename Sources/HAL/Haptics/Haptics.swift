public import Logging

/// Plays ``HapticPattern``s on a ``HapticLine``: what the agent calls when guidance arrives.
///
/// ``play(_:receivedAt:)`` sets the pattern's first edge itself, on the caller's thread: one
/// `ioctl`, so the motor starts without waiting for any thread to be scheduled while the encoder
/// keeps every core busy. The rest of the pattern is timed on a thread of the player's own
/// (`haptics`), which waits for each later edge with an absolute `CLOCK_MONOTONIC` deadline (the
/// kernel's high-resolution timer, but a newer pattern wakes it at once). Every edge, the
/// caller's and the thread's, is set under one lock, so a pulse that ends on the thread can
/// never land after a newer pattern's start.
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
    /// - Throws: The line's error if it cannot be driven inactive, or ``GPIOError`` if the
    ///   thread cannot start; the line is released either way.
    public init(
        line: any HapticLine, logger: Logger, latencyHistory: Int = 256,
        onLatency: (@Sendable (_ latency: Duration, _ pattern: HapticPattern) -> Void)? = nil
    ) throws {
        do {
            try line.setActive(false)
            worker = try HapticsWorker(line: line, logger: logger, latencyHistory: max(1, latencyHistory), onLatency: onLatency)
        } catch {
            line.release()
            throw error
        }
        logger.debug("haptics: ready on \(line)")
    }

    deinit { worker.close() }

    /// The line, for logs.
    public var lineDescription: String { worker.line.description }

    /// Starts `pattern`: its first pulse is on when this returns, and the player's thread ends it
    /// and plays the rest. A pattern still playing is cut short first: its line goes inactive,
    /// then the new one starts. Does nothing after ``close()`` or once the line was released
    /// after errors (see ``isReleased``).
    ///
    /// - Parameter receivedAt: When the event that asks for the pattern arrived; the latency to
    ///   the first pulse is measured from it.
    public func play(_ pattern: HapticPattern, receivedAt: ContinuousClock.Instant = .now) {
        worker.play(pattern, receivedAt: receivedAt)
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

/// The thread and what it shares with callers, all under `lock`: the timing rules
/// (``Haptics/StateMachine``: the pattern being timed, the line's level), and what callers did
/// that the thread still has to log and count.
private final class HapticsWorker: Sendable {

    /// A pattern that stopped on an error.
    struct Failure {
        var pattern: HapticPattern
        var error: any Error
        /// Set when the line could not be driven inactive afterwards either.
        var inactiveError: (any Error)?
    }

    enum Event {
        case started(HapticPattern, latency: Duration, cut: HapticPattern?)
        case failed(Failure)
    }

    struct State {
        var machine = Haptics.StateMachine()
        /// Callers' starts and failures, oldest first, for the thread to log and count.
        var events: [Event] = []
        var stopping = false
        /// The thread released the line after errors and ended.
        var failed = false
        var thread: NamedThread?
        var latencies: [Duration] = []
    }

    /// What the thread found when it woke.
    enum Wake {
        case news([Event], stopping: Bool, inactiveError: (any Error)?)
        case finished
        case failed(Failure)
        case timing
    }

    /// Patterns that fail in a row (each time the line could still be driven inactive) before
    /// the line is given up.
    static let failuresBeforeRelease = 3

    let line: any HapticLine
    private let logger: Logger
    private let latencyHistory: Int
    private let onLatency: (@Sendable (Duration, HapticPattern) -> Void)?
    private let lock = WaitableState(State())

    init(
        line: any HapticLine, logger: Logger, latencyHistory: Int,
        onLatency: (@Sendable (Duration, HapticPattern) -> Void)?
    ) throws(GPIOError) {
        self.line = line
        self.logger = logger
        self.latencyHistory = latencyHistory
        self.onLatency = onLatency
        do {
            let thread = try NamedThread.start(name: "haptics") { [self] in run() }
            lock.withLock { $0.thread = thread }
        } catch {
            throw .thread(error.code)
        }
    }

    // MARK: - Callers

    func play(_ pattern: HapticPattern, receivedAt: ContinuousClock.Instant) {
        let accepted = lock.update { state -> Bool in
            guard !state.stopping, !state.failed else { return false }
            do {
                // A pulse still on ends first: two pulses never merge into one.
                if state.machine.mustEndPulseFirst {
                    try line.setActive(false)
                    state.machine.lineSetInactive()
                }
                try line.setActive(true)
            } catch {
                state.events.append(.failed(stop(pattern, error, &state)))
                return true
            }
            let edge = MonotonicClock.now()
            let latency = ContinuousClock.now - receivedAt
            let cut = state.machine.started(pattern, at: edge)
            if state.latencies.count >= latencyHistory {
                state.latencies.removeFirst(state.latencies.count - latencyHistory + 1)
            }
            state.latencies.append(latency)
            state.events.append(.started(pattern, latency: latency, cut: cut))
            return true
        }
        if !accepted { logger.debug("haptics: \(pattern) not played: the line was released") }
    }

    var recentLatencies: [Duration] { lock.withLock { $0.latencies } }

    var isReleased: Bool { lock.withLock { $0.stopping || $0.failed } }

    func close() {
        let thread = lock.update { state -> NamedThread? in
            guard !state.stopping else { return nil }
            state.stopping = true
            defer { state.thread = nil }
            return state.thread
        }
        guard let thread else { return }
        // From the thread itself (a callback) this detaches: it stops the pattern and releases
        // the line as it ends.
        thread.join()
        guard !thread.isCurrent else { return }
        line.release()
        logger.debug("haptics: closed; \(line) released")
    }

    // MARK: - The thread

    private func run() {
        var failures = 0
        loop: while true {
            switch nextWake() {
            case .news(let events, let stopping, let inactiveError):
                for event in events {
                    switch event {
                    case .started(let pattern, let latency, let cut):
                        if let cut { logger.debug("haptics: \(cut) cut short by \(pattern)") }
                        logger.debug("haptics: \(pattern) on \(Self.milliseconds(latency)) after it was received")
                        onLatency?(latency, pattern)
                    case .failed(let failure):
                        guard keepLine(after: failure, failures: &failures) else { break loop }
                    }
                }
                if let inactiveError { logger.error("haptics: \(inactiveError)") }
                if stopping { break loop }
            case .finished:
                failures = 0
            case .failed(let failure):
                guard keepLine(after: failure, failures: &failures) else { break loop }
            case .timing:
                break
            }
        }
        if lock.withLock({ !$0.stopping }) { giveUp() }
        line.release()
    }

    /// Sleeps until a caller did something or the next edge is due, and sets that edge.
    private func nextWake() -> Wake {
        let news = { (state: State) in state.stopping || !state.events.isEmpty }
        // Copied out under the lock and read outside it: reading `due` inside the closure crashes
        // the Swift 6.3 optimizer (release builds only: "Found ownership error" in CopyPropagation).
        let machine = lock.withLock { $0.machine }
        guard let due = machine.due else {
            return lock.wait(until: news) { take(&$0) }
        }
        // A caller that changes `playing` also adds an event, so a stale `due` only wakes early.
        return lock.wait(until: news, deadline: due) { state, woken in woken ? take(&state) : edge(&state) }
    }

    /// The callers' events; when stopping, the line driven inactive too.
    private func take(_ state: inout State) -> Wake {
        defer { state.events = [] }
        guard state.stopping else { return .news(state.events, stopping: false, inactiveError: nil) }
        var inactiveError: (any Error)?
        var lineActive = state.machine.lineActive
        if lineActive {
            do {
                try line.setActive(false)
                lineActive = false
            } catch {
                inactiveError = error
            }
        }
        state.machine.stopped(lineActive: lineActive)
        return .news(state.events, stopping: true, inactiveError: inactiveError)
    }

    /// The edge that is due: a pulse ends or the next one starts. Every time counts from the
    /// moment the line reported the edge before it done, so a late wake-up shifts the rest of
    /// the pattern but never shortens a pulse or a gap.
    private func edge(_ state: inout State) -> Wake {
        guard let pattern = state.machine.playing?.pattern, let active = state.machine.nextLevel else { return .timing }
        do {
            try line.setActive(active)
        } catch {
            return .failed(stop(pattern, error, &state))
        }
        return state.machine.edgeSet(at: MonotonicClock.now()) ? .finished : .timing
    }

    /// After an error: the pattern stops and the line is driven inactive, if it can be.
    private func stop(_ pattern: HapticPattern, _ error: any Error, _ state: inout State) -> Failure {
        do {
            try line.setActive(false)
            state.machine.stopped(lineActive: false)
            return Failure(pattern: pattern, error: error)
        } catch let inactiveError {
            state.machine.stopped(lineActive: state.machine.lineActive)
            return Failure(pattern: pattern, error: error, inactiveError: inactiveError)
        }
    }

    /// Logs a failed pattern; false when the line is to be given up.
    private func keepLine(after failure: Failure, failures: inout Int) -> Bool {
        logger.error("haptics: \(failure.pattern) stopped: \(failure.error)")
        if let inactiveError = failure.inactiveError {
            logger.error("haptics: \(inactiveError)")
            logger.error("haptics: \(line) cannot be driven inactive; releasing it, haptics are off until restart")
            return false
        }
        failures += 1
        guard failures >= Self.failuresBeforeRelease else { return true }
        logger.error("haptics: \(failures) patterns in a row failed on \(line); releasing it, haptics are off until restart")
        return false
    }

    /// No caller touches the line after this; the thread releases it and ends.
    private func giveUp() {
        lock.withLock { state in
            state.failed = true
            state.machine.stopped(lineActive: state.machine.lineActive)
            state.events = []
        }
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
}
