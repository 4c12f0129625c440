import Foundation
import HAL
import Logging
import Synchronization
import TestSupport
import Testing

// The player against a fake line that records every edge with its time and thread, the pattern
// rules, the log-only line, and the real libgpiod line where no chip is needed (missing chips and
// lines, paths that are no chip).
// Timing bounds are wide on purpose: the tests run on a loaded machine. What must happen at a
// given moment of a pattern (a newer pattern, a close) is done from a thread of its own: a test
// task can wait seconds for the cooperative pool when other suites keep it busy.

/// Records each value set, with the time it was set; fails the calls `failing` picks.
private final class FakeHapticLine: HapticLine {
    struct Edge {
        var active: Bool
        var at: ContinuousClock.Instant
        /// The thread that set it.
        var thread: pthread_t
    }

    struct Failure: Error, CustomStringConvertible {
        var call: Int
        var description: String { "fake line: set call \(call) failed" }
    }

    private struct State {
        var edges: [Edge] = []
        var calls = 0
        var failures = 0
        var releases = 0
    }

    let description = "fake line"
    private let failing: @Sendable (_ call: Int, _ active: Bool) -> Bool
    private let state = Mutex(State())

    /// `failing(call, active)`: whether set call number `call` (from 1) throws.
    init(failing: @escaping @Sendable (_ call: Int, _ active: Bool) -> Bool = { _, _ in false }) {
        self.failing = failing
    }

    func setActive(_ active: Bool) throws {
        let now = ContinuousClock.now
        try state.withLock { state throws(Failure) in
            state.calls += 1
            if state.releases > 0 || failing(state.calls, active) {
                state.failures += 1
                throw Failure(call: state.calls)
            }
            state.edges.append(Edge(active: active, at: now, thread: pthread_self()))
        }
    }

    func release() { state.withLock { $0.releases += 1 } }

    var edges: [Edge] { state.withLock { $0.edges } }
    var values: [Bool] { edges.map(\.active) }
    var failures: Int { state.withLock { $0.failures } }
    var released: Bool { state.withLock { $0.releases > 0 } }

    /// (start, length) of each pulse, from the set edges; the values must alternate.
    var pulses: [(start: ContinuousClock.Instant, length: Duration)] {
        let edges = self.edges
        return edges.indices.compactMap { index in
            guard edges[index].active, index + 1 < edges.count, !edges[index + 1].active else { return nil }
            return (edges[index].at, edges[index].at.duration(to: edges[index + 1].at))
        }
    }
}

/// Keeps every message, for checks on what was logged.
private struct CapturingLogHandler: LogHandler {
    final class Box: Sendable {
        let lines = Mutex<[String]>([])
    }

    let box: Box
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    func log(event: LogEvent) { box.lines.withLock { $0.append(event.message.description) } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}

/// A logger that keeps its messages, and the box that holds them.
private func capturingLogger() -> (Logger, CapturingLogHandler.Box) {
    let box = CapturingLogHandler.Box()
    return (Logger(label: "haptics-tests") { _ in CapturingLogHandler(box: box) }, box)
}

private let logger = capturingLogger().0

/// Runs `body` on a new thread after `delay`; what it returns is in the result once it is done.
private func onThread<T: Sendable>(after delay: Duration, _ body: @escaping @Sendable () -> T) -> ThreadResult<T> {
    let result = ThreadResult<T>()
    Thread.detachNewThread {
        Thread.sleep(forTimeInterval: delay / .seconds(1))
        let value = body()
        result.value.withLock { $0 = value }
    }
    return result
}

private final class ThreadResult<T: Sendable>: Sendable {
    let value = Mutex<T?>(nil)
    var done: Bool { value.withLock { $0 != nil } }
}

private func pattern(_ milliseconds: [Int], name: String = "") throws -> HapticPattern {
    try HapticPattern(milliseconds, name: name)
}

@Suite struct HapticPatternTests {
    @Test func clearIsOne150MillisecondPulseAndAlertIsThree80MillisecondPulses() {
        #expect(HapticPattern.clear.milliseconds == [150])
        #expect(HapticPattern.clear.pulses == [150])
        #expect(HapticPattern.clear.duration == .milliseconds(150))
        #expect(HapticPattern.alert.milliseconds == [80, 80, 80, 80, 80])
        #expect(HapticPattern.alert.pulses == [80, 80, 80])
        #expect(HapticPattern.alert.duration == .milliseconds(400))
        #expect(HapticPattern.clear.description == "clear [150] ms")
    }

    @Test func theLimitsAreAccepted() throws {
        #expect(try pattern([1]).milliseconds == [1])
        #expect(try pattern([5000, 5000]).duration == .milliseconds(5000))
        #expect(try pattern(Array(repeating: 1, count: 16)).pulses.count == 8)
    }

    @Test func anEmptyPatternIsRejected() {
        let error = #expect(throws: HapticPatternError.self) { try pattern([], name: "clear") }
        #expect(error?.description.contains("haptic pattern \"clear\" is empty") == true)
    }

    @Test(arguments: [[0], [150, 0, 150], [5001], [-80], [80, 80, 80, 80, 80, 6000]])
    func aTimeOutOfRangeIsRejectedByPosition(_ milliseconds: [Int]) {
        let error = #expect(throws: HapticPatternError.self) { try pattern(milliseconds) }
        let index = milliseconds.firstIndex { !(1...5000).contains($0) }!
        #expect(error?.description.contains("time \(index + 1)") == true, "\(String(describing: error))")
        #expect(error?.description.contains("is \(milliseconds[index]) ms; each must be 1...5000 ms") == true)
        #expect(error?.milliseconds == milliseconds)
    }

    @Test func moreThanSixteenTimesAreRejected() {
        let error = #expect(throws: HapticPatternError.self) { try pattern(Array(repeating: 50, count: 17)) }
        #expect(error?.description.contains("has 17 times; at most 16 are allowed") == true)
    }
}

@Suite struct HapticsTests {
    @Test func theLineIsDrivenInactiveAtStartAndNothingElseHappensUntilPlay() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        #expect(line.values == [false])
        #expect(!line.released)
        #expect(haptics.recentLatencies.isEmpty)
        // Closing joins the thread: nothing it did while idle can land after this.
        haptics.close()
        #expect(line.values == [false])
    }

    /// How soon the pulse starts and how close to 150 ms it lasts on a loaded board is measured by
    /// `bench/voice_touch.sh` (BENCHMARKS.md, "Voice and touch"), not here: a busy test machine only makes both later.
    @Test func clearIsOnePulseOfAtLeast150Milliseconds() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        let received = ContinuousClock.now
        haptics.play(.clear, receivedAt: received)
        #expect(await eventually { line.values.count >= 3 })
        let latencies = haptics.recentLatencies
        haptics.close()
        #expect(line.values == [false, true, false])
        let pulses = line.pulses
        try #require(pulses.count == 1)
        // The thread ends the pulse at its deadline or later, never sooner.
        #expect(pulses[0].length >= .milliseconds(150), "\(pulses[0].length)")
        try #require(latencies.count == 1)
        // What was measured is the time from `receivedAt` to the edge the fake recorded.
        #expect(latencies[0] >= received.duration(to: pulses[0].start))
    }

    @Test func theFirstEdgeIsSetOnTheCallersThreadBeforePlayReturns() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        defer { haptics.close() }
        // A thread of the test's own: the caller's thread is known and nothing else runs on it.
        let played = onThread(after: .zero) { () -> (caller: pthread_t, edges: [FakeHapticLine.Edge]) in
            haptics.play(.clear)
            return (pthread_self(), line.edges)
        }
        #expect(await eventually { played.done })
        let (caller, edges) = try #require(played.value.withLock { $0 })
        #expect(edges.map(\.active) == [false, true], "the line is active when play returns")
        #expect(pthread_equal(try #require(edges.last).thread, caller) != 0, "set by the caller")
        #expect(await eventually { line.values.count == 3 })
        let end = try #require(line.edges.last)
        #expect(!end.active)
        #expect(pthread_equal(end.thread, caller) == 0, "the pulse is ended by the player's thread")
    }

    @Test func patternsStartedFromManyThreadsNeverOverlapAndTheLastOnePlaysWhole() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        defer { haptics.close() }
        let short = try pattern([1, 1, 1, 1, 1], name: "short")
        let threads = (0..<4).map { index in
            onThread(after: .zero) { () -> Bool in
                for round in 0..<50 {
                    haptics.play(short)
                    if (round + index) % 3 == 0 { Thread.sleep(forTimeInterval: 0.002) }
                }
                return true
            }
        }
        #expect(await eventually(within: .seconds(30)) { threads.allSatisfy(\.done) })
        let final = try pattern([20, 20, 20], name: "final")
        let last = onThread(after: .zero) { () -> pthread_t in
            haptics.play(final)
            return pthread_self()
        }
        #expect(await eventually { last.done })
        let caller = try #require(last.value.withLock { $0 })
        let callerStarted = { (edges: [FakeHapticLine.Edge]) in edges.lastIndex { pthread_equal($0.thread, caller) != 0 } }
        #expect(await eventually { callerStarted(line.edges).map { line.edges.count - $0 >= 4 } == true })
        // Closing joins the thread: a stale edge of an older pattern, if one could land, has.
        haptics.close()
        let edges = line.edges
        // On, off, on, off, …: a pulse ended by a stale edge of an older pattern would show as
        // two edges alike in a row, or the last pattern short of its four edges.
        #expect(zip(edges, edges.dropFirst()).allSatisfy { $0.active != $1.active }, "\(edges.map(\.active))")
        let start = try #require(callerStarted(edges))
        #expect(edges[start...].map(\.active) == [true, false, true, false])
        #expect(edges[(start + 1)...].allSatisfy { pthread_equal($0.thread, caller) == 0 })
    }

    @Test func alertIsThreePulsesWithGapsBetween() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        haptics.play(.alert)
        #expect(await eventually { line.values.count >= 7 })
        #expect(haptics.recentLatencies.count == 1)
        haptics.close()
        #expect(line.values == [false, true, false, true, false, true, false])
        let pulses = line.pulses
        try #require(pulses.count == 3)
        // Each time is waited for in full (a late wake-up only makes it longer).
        let times = HapticPattern.alert.milliseconds
        for (index, pulse) in pulses.enumerated() {
            #expect(pulse.length >= .milliseconds(times[2 * index]), "\(pulse.length)")
        }
        for (index, (earlier, later)) in zip(pulses, pulses.dropFirst()).enumerated() {
            let gap = (earlier.start + earlier.length).duration(to: later.start)
            #expect(gap >= .milliseconds(times[2 * index + 1]), "\(gap)")
        }
    }

    @Test func aTrailingOffTimeEndsWithTheLineInactive() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        haptics.play(try pattern([40, 40, 40, 2000]))
        #expect(await eventually { line.values.count >= 5 })
        haptics.close()
        #expect(line.values == [false, true, false, true, false])
    }

    @Test func aNewerPatternCutsTheOnePlayingShortThenStarts() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        // Long, so the cut is the newer pattern's doing (checked by the thread that set it below),
        // not the long pulse ending by itself.
        haptics.play(try pattern([5000, 5000, 5000], name: "long"))
        let preempted = onThread(after: .milliseconds(100)) { () -> (at: ContinuousClock.Instant, thread: pthread_t) in
            let now = ContinuousClock.now
            haptics.play(.clear, receivedAt: now)
            return (now, pthread_self())
        }
        #expect(await eventually { preempted.done && line.values.count >= 5 })
        #expect(haptics.recentLatencies.count == 2)
        haptics.close()
        // Inactive first, then the new pulse: never two pulses at once.
        #expect(line.values == [false, true, false, true, false])
        let edges = line.edges
        #expect(zip(edges, edges.dropFirst()).allSatisfy { $0.at <= $1.at })
        let caller = try #require(preempted.value.withLock { $0 })
        // The long pulse was cut by the newer pattern's caller, after it came, and the new pulse
        // started on that same call.
        #expect(edges[2].at >= caller.at)
        #expect(pthread_equal(edges[2].thread, caller.thread) != 0, "the cut is the newer pattern's doing")
        #expect(pthread_equal(edges[3].thread, caller.thread) != 0)
        #expect(try #require(line.pulses.last).length >= .milliseconds(150))
    }

    @Test func closeStopsThePulseDrivesInactiveAndReleasesAndIsSafeTwice() async throws {
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger)
        // On for 5 s, off for 5 s, on again: a close that let the pattern play on would leave
        // more edges than these three.
        haptics.play(try pattern([5000, 5000, 5000]))
        let closing = onThread(after: .milliseconds(100)) { () -> Bool in
            haptics.close()
            return true
        }
        #expect(await eventually { closing.done })
        #expect(line.values == [false, true, false])
        #expect(line.released)
        #expect(haptics.isReleased)
        haptics.close()
        // After close, play sets nothing, not even its first edge (set on the caller's thread).
        haptics.play(.clear)
        #expect(line.values == [false, true, false])
    }

    @Test func closeWhileIdleReleasesAndTheLastReferenceReleasesToo() throws {
        let idle = FakeHapticLine()
        let haptics = try Haptics(line: idle, logger: logger)
        haptics.close()
        #expect(idle.released)

        let dropped = FakeHapticLine()
        do {
            let haptics = try Haptics(line: dropped, logger: logger)
            haptics.play(.clear)
        }
        #expect(dropped.released)
        #expect(dropped.values.last == false)
    }

    @Test func anErrorMidPatternThatPersistsReleasesTheLine() async throws {
        // Call 1 is the start; 2 is the first pulse; from 3 on (its end, then the best-effort
        // inactive) every call fails.
        let line = FakeHapticLine { call, _ in call >= 3 }
        let (logger, logged) = capturingLogger()
        let haptics = try Haptics(line: line, logger: logger)
        defer { haptics.close() }
        haptics.play(.alert)
        #expect(await eventually { line.released })
        #expect(line.failures == 2)
        #expect(await eventually { haptics.isReleased })
        #expect(line.values == [false, true])
        let errors = logged.lines.withLock { $0 }
        #expect(errors.contains("haptics: alert [80, 80, 80, 80, 80] ms stopped: fake line: set call 3 failed"), "\(errors)")
        #expect(errors.contains { $0.contains("fake line cannot be driven inactive; releasing it") }, "\(errors)")
        // Released: play sets nothing, not even its first edge (set on the caller's thread).
        haptics.play(.clear)
        #expect(line.values == [false, true])
    }

    @Test func aSingleErrorStopsThePatternButKeepsTheLine() async throws {
        // The end of the first pulse fails once; the best-effort inactive after it works.
        let line = FakeHapticLine { call, _ in call == 3 }
        let haptics = try Haptics(line: line, logger: logger)
        defer { haptics.close() }
        haptics.play(.alert)
        #expect(await eventually { line.failures == 1 && line.values.count >= 3 })
        #expect(!line.released)
        #expect(!haptics.isReleased)
        haptics.play(.clear)
        #expect(await eventually { line.values.count >= 5 })
        // Closing joins the thread: had the alert gone on after its error, its edges would be here.
        haptics.close()
        #expect(line.values == [false, true, false, true, false])
    }

    @Test func threeFailedPatternsInARowReleaseTheLine() async throws {
        // Every "active" fails; every "inactive" works.
        let line = FakeHapticLine { _, active in active }
        let haptics = try Haptics(line: line, logger: logger)
        defer { haptics.close() }
        for attempt in 1...2 {
            haptics.play(.clear)
            #expect(await eventually { line.failures == attempt })
        }
        haptics.play(.clear)
        #expect(await eventually { line.released && haptics.isReleased })
        // A line released after two failures would not have been tried a third time.
        #expect(line.failures == 3)
        #expect(line.values.allSatisfy { !$0 })
    }

    @Test func aLineThatCannotBeDrivenInactiveAtStartIsReleasedAndTheErrorThrown() {
        let line = FakeHapticLine { call, _ in call == 1 }
        #expect(throws: FakeHapticLine.Failure.self) { try Haptics(line: line, logger: logger) }
        #expect(line.released)
    }

    @Test func eachLatencyIsReportedWithItsPattern() async throws {
        let reported = Mutex<[(Duration, String)]>([])
        let line = FakeHapticLine()
        let haptics = try Haptics(line: line, logger: logger, latencyHistory: 2) { latency, pattern in
            reported.withLock { $0.append((latency, pattern.name)) }
        }
        defer { haptics.close() }
        for _ in 0..<3 {
            let before = line.values.count
            haptics.play(.clear)
            #expect(await eventually { line.values.count == before + 2 })
        }
        #expect(reported.withLock { $0.map(\.1) } == ["clear", "clear", "clear"])
        #expect(haptics.recentLatencies == reported.withLock { $0.suffix(2).map(\.0) })
    }

    @Test func theLoggingLineWritesOneBuzzLinePerPulse() async throws {
        let (captured, box) = capturingLogger()
        let line = LoggingHapticLine(logger: captured)
        let haptics = try Haptics(line: line, logger: logger)
        haptics.play(.alert)
        let buzzes = { box.lines.withLock { $0.filter { $0.hasPrefix("haptics: buzz ") } } }
        #expect(await eventually { buzzes().count == 3 })
        for message in buzzes() {
            let milliseconds = Int(message.dropFirst("haptics: buzz ".count).dropLast(" ms".count))
            #expect(milliseconds.map { (64...350).contains($0) } == true, "\(message)")
        }
        haptics.close()
        #expect(throws: GPIOError.self) { try line.setActive(true) }
        #expect(buzzes().count == 3)
    }
}

@Suite struct GPIOLineTests {
    /// What this machine's chips are, as the messages list them: none, or some.
    private func namesTheChipsHere(_ text: String) -> Bool {
        text.contains("chips here: gpiochip") || text.contains("there are no GPIO chips, /dev/gpiochipN")
    }

    @Test func aMissingChipIsAnErrorNamingTheChipTheLineAndTheChipsThereAre() {
        let error = #expect(throws: GPIOError.self) { try GPIOLine(chip: "gpiochip999", line: .offset(5)) }
        let text = error?.description ?? ""
        #expect(text.hasPrefix("GPIO chip \"gpiochip999\" (/dev/gpiochip999) line 5: no such chip"), "\(text)")
        #expect(namesTheChipsHere(text), "\(text)")
        #expect(error?.isChipNotFound == true && error?.isNotFound == true && error?.isOpenFailure == true)
        #expect(error?.isBusy == false && error?.isLineNotFound == false && error?.holder == nil)
        #expect(error?.code == ENOENT)
    }

    @Test(arguments: ["gpiochip999", "/dev/gpiochip999", "999"])
    func aMissingChipGivenAsNamePathOrNumberIsNamedWithTheLineName(_ chip: String) {
        let error = #expect(throws: GPIOError.self) { try GPIOLine(chip: chip, line: .name("haptic"), activeLow: true) }
        let text = error?.description ?? ""
        #expect(text.contains("\"\(chip)\"") && text.contains("line \"haptic\""), "\(text)")
        #expect(text.contains("no such chip"), "\(text)")
        #expect(error?.isChipNotFound == true)
    }

    @Test func aLabelNoChipHasIsAMissingChip() {
        let error = #expect(throws: GPIOError.self) { try GPIOLine(chip: "dashcam-no-such-label", line: .offset(1)) }
        let text = error?.description ?? ""
        #expect(text.hasPrefix("GPIO chip \"dashcam-no-such-label\" line 1: no such chip"), "\(text)")
        #expect(text.contains("no chip has that label") && namesTheChipsHere(text), "\(text)")
        #expect(error?.isChipNotFound == true)
    }

    @Test func aLineNameFoundOnNoChipIsAMissingLine() {
        let error = #expect(throws: GPIOError.self) {
            try GPIOLine(chip: nil, line: .name("dashcam-no-such-line"))
        }
        let text = error?.description ?? ""
        #expect(text.hasPrefix("GPIO line \"dashcam-no-such-line\" (any chip): no such line"), "\(text)")
        #expect(error?.isLineNotFound == true && error?.isNotFound == true && error?.isChipNotFound == false)
    }

    @Test(arguments: ["/dev/null", "regular file"])
    func aPathThatIsNoGPIOChipIsSaidSo(_ what: String) throws {
        var path = what
        if what == "regular file" {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-chip-\(UUID().uuidString)").path
            try Data("gpio".utf8).write(to: URL(fileURLWithPath: path))
        }
        defer { if path != what { try? FileManager.default.removeItem(atPath: path) } }
        let error = #expect(throws: GPIOError.self) { try GPIOLine(chip: path, line: .offset(0)) }
        let text = error?.description ?? ""
        #expect(text.hasPrefix("GPIO chip \"\(path)\" line 0: not a GPIO chip"), "\(text)")
        #expect(error?.isNotAChip == true && error?.isNotFound == false && error?.isOpenFailure == true)
    }

    @Test func anOffsetNeedsAChipAndCannotBeNegative() {
        let noChip = #expect(throws: GPIOError.self) { try GPIOLine(chip: "", line: .offset(5)) }
        #expect(noChip?.description.contains("line 5: no chip given") == true, "\(String(describing: noChip))")
        #expect(noChip?.isInvalidRequest == true && noChip?.isNotFound == false)
        let negative = #expect(throws: GPIOError.self) { try GPIOLine(chip: "gpiochip0", line: .offset(-1)) }
        #expect(negative?.description.contains("line -1: a line offset is 0 or more") == true, "\(String(describing: negative))")
        #expect(negative?.isInvalidRequest == true)
    }

    @Test func theLibraryVersionIsKnown() {
        #expect(GPIOLine.libraryVersion.hasPrefix("libgpiod "))
        #expect(GPIOLine.libraryVersion.contains(" API)"))
    }
}
