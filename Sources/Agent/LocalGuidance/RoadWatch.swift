public import HAL
import Foundation
import NIOPosix
public import RoadScene
import Synchronization

/// The local road checks: while on, takes a frame now and then from the capture thread and looks
/// at it on a thread of its own (``RoadLook``: too dark, lens covered, frozen, people).
///
/// The camera and the encoder never wait for it. ``offer(_:)`` copies the frame's luma only when a
/// look is due: at most `fps` a second, and no sooner than the CPU share allows after the last
/// look took its time. A frame that is due while the last look is still running, or the share is
/// used up, is not searched for people (skipped, and counted), but its picture is still checked
/// (too dark, covered, frozen: about a millisecond) on a second thread, so that a view that goes
/// dark is told at the looks' pace even where a search takes seconds. The copy needs no decode and
/// is at most 960 pixels wide, as the server's `vision` analyzer looks: a 640x360 camera is seen
/// whole, a bigger one every second or third pixel.
///
/// A search that saw a shape not quite sure enough to be a person (``RoadLook/maybeWeight``) is
/// followed by another as soon as the CPU share allows, not a look's interval later: the person
/// the first one missed is told that much sooner (``nextLook(at:took:idleFactor:due:again:)``).
/// Only once in a row, so a shape that stays unsure costs at most twice the looks.
public final class RoadWatch: FrameTap {
    public struct Look: Sendable, Equatable {
        public var finding: RoadFinding?
        /// The search saw a shape not sure enough to count: the next frame the CPU share allows
        /// is searched too.
        public var again = false
        /// The detector's and the checks' time for this frame.
        public var took: Duration
        /// The luma size looked at.
        public var width: Int
        public var height: Int
    }

    public struct Counts: Sendable, Equatable {
        /// Frames looked at.
        public var looked = 0
        /// Frames due that were not looked at: the last look was still running or the CPU share was used up.
        public var skipped = 0
        /// Frames in a layout with no 8-bit luma to look at.
        public var unreadable = 0
    }

    /// Each look's result, in order. Holds the newest few for a consumer that falls behind.
    public let results: AsyncStream<Look>
    private let sink: AsyncStream<Look>.Continuation
    /// Frames spaced at least this far apart, in ns.
    private let interval: UInt64
    /// After a look that took t ns, no frame for t × (1 / share − 1).
    private let idleFactor: Double
    private let maxWidth: Int
    private let look: RoadLook
    private let detector: PeopleDetector?
    /// Why this watch cannot search for people (the detector's library is not there), if so. The
    /// picture checks (dark, covered, frozen) work without it.
    public let detectorProblem: String?
    private let pool: NIOThreadPool
    /// The picture checks of frames that are not searched for people.
    private let scenePool: NIOThreadPool
    private let checking = Atomic<Bool>(false)
    private let looking = Atomic<Bool>(false)
    private let busy = Atomic<Bool>(false)
    private let dueAt = Atomic<UInt64>(0)
    private let restingUntil = Atomic<UInt64>(0)
    /// The last search was one that came early.
    private let lookedAgain = Atomic<Bool>(false)
    private let looked = Atomic<Int>(0)
    private let skipped = Atomic<Int>(0)
    private let unreadable = Atomic<Int>(0)
    /// The last frames looked at, for the frozen check: by the search's looks and the picture
    /// checks alike, in the order they were taken.
    private let window = Mutex<[GrayFrame]>([])

    /// Where OpenCV's people detector is loaded from, the first time a look needs it: next to the
    /// executable (a build folder), then where the package installs it.
    public static var detectorLibraries: [String] {
        var candidates: [String] = []
        if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append(URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("libRoadVision.so").path)
        }
        candidates.append("/usr/lib/dashcam-agent/libRoadVision.so")
        return candidates
    }

    /// Whether OpenCV has been loaded: only once a look has searched a frame for people.
    public var detectorLoaded: Bool { detector?.isLoaded ?? false }

    /// Frames looked at together by the scene checks (the frozen check compares them).
    public static let windowFrames = 3

    public convenience init(fps: Int, maxCpuPercent: Int, maxWidth: Int = 960, look: RoadLook = RoadLook()) throws {
        try self.init(interval: .nanoseconds(1_000_000_000 / max(1, fps)), maxCpuPercent: maxCpuPercent, maxWidth: maxWidth, look: look)
    }

    /// Looks at most once every `interval` (and again sooner after a search that saw a shape).
    public init(interval: Duration, maxCpuPercent: Int, maxWidth: Int = 960, look: RoadLook = RoadLook()) throws {
        let (seconds, attoseconds) = interval.components
        self.interval = UInt64(clamping: max(1, min(seconds, 1_000_000) * 1_000_000_000 + attoseconds / 1_000_000_000))
        idleFactor = 100 / Double(min(100, max(1, maxCpuPercent))) - 1
        self.maxWidth = maxWidth
        self.look = look
        do {
            detector = try PeopleDetector(.library(candidates: Self.detectorLibraries))
            detectorProblem = nil
        } catch {
            detector = nil
            detectorProblem = "\(error)"
        }
        (results, sink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(4))
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        scenePool = NIOThreadPool(numberOfThreads: 1)
        scenePool.start()
    }

    public var isLooking: Bool { looking.load(ordering: .relaxed) }

    /// Whether a look that searches for people is running (a due frame now gets only the
    /// picture checks).
    public var isSearching: Bool { busy.load(ordering: .acquiring) }

    public var counts: Counts {
        Counts(
            looked: looked.load(ordering: .relaxed), skipped: skipped.load(ordering: .relaxed),
            unreadable: unreadable.load(ordering: .relaxed))
    }

    /// Starts looking, with no memory of frames from an earlier run.
    public func start() {
        window.withLock { $0.removeAll() }
        dueAt.store(0, ordering: .relaxed)
        looking.store(true, ordering: .relaxed)
    }

    public func stop() {
        looking.store(false, ordering: .relaxed)
    }

    /// Stops for good: ends ``results`` and the thread.
    public func shutdown() async {
        stop()
        sink.finish()
        try? await pool.shutdownGracefully()
        try? await scenePool.shutdownGracefully()
    }

    /// On the capture thread: returns at once.
    public func offer(_ frame: Frame) {
        guard looking.load(ordering: .relaxed) else { return }
        let now = MonotonicClock.now()
        let due = dueAt.load(ordering: .relaxed)
        guard now >= due else { return }
        // A due frame is taken or skipped once; the next is due an interval later (less a tenth,
        // for the jitter of the frames' arrival).
        dueAt.store(now &+ interval &- interval / 10, ordering: .relaxed)
        guard now >= restingUntil.load(ordering: .relaxed),
            busy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
        else {
            skipped.add(1, ordering: .relaxed)
            checkPicture(of: frame)
            return
        }
        guard let luma = frame.luma(maxWidth: maxWidth) else {
            unreadable.add(1, ordering: .relaxed)
            busy.store(false, ordering: .releasing)
            return
        }
        pool.submit { [self] state in
            defer { busy.store(false, ordering: .releasing) }
            guard case .active = state else { return }
            examine(GrayFrame(width: luma.width, height: luma.height, pixels: luma.pixels))
        }
    }

    /// A due frame that the search for people has no time for: only its picture is checked, on
    /// the second thread (one at a time; a frame due while one is being checked is let go). Only
    /// a finding is reported: "nothing" is for a look that also searched for people.
    private func checkPicture(of frame: Frame) {
        guard checking.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return }
        guard let luma = frame.luma(maxWidth: maxWidth) else {
            unreadable.add(1, ordering: .relaxed)
            checking.store(false, ordering: .releasing)
            return
        }
        scenePool.submit { [self] state in
            defer { checking.store(false, ordering: .releasing) }
            guard case .active = state else { return }
            let started = MonotonicClock.now()
            let frame = GrayFrame(width: luma.width, height: luma.height, pixels: luma.pixels)
            guard let problem = look.scene.finding(in: remember(frame)), looking.load(ordering: .relaxed) else { return }
            let took = MonotonicClock.now() &- started
            sink.yield(Look(finding: RoadFinding(problem), took: .nanoseconds(Int64(took)), width: frame.width, height: frame.height))
        }
    }

    /// Adds `frame` to the frames the picture checks compare; returns them, oldest first.
    private func remember(_ frame: GrayFrame) -> [GrayFrame] {
        window.withLock { window in
            window.append(frame)
            if window.count > Self.windowFrames { window.removeFirst(window.count - Self.windowFrames) }
            return window
        }
    }

    private func examine(_ frame: GrayFrame) {
        let started = MonotonicClock.now()
        let frames = remember(frame)
        var finding: RoadFinding?
        var again = false
        if let problem = look.scene.finding(in: frames) {
            finding = RoadFinding(problem)
        } else if let detector, let people = try? look.people(in: frame, detector: detector) {
            if people.count > 0 { finding = people.close ? .pedestrianClose : .pedestrian }
            // Once: a shape that stays unsure (a sign, a tree) does not make every look come early.
            again = people.count == 0 && people.maybe && !lookedAgain.load(ordering: .relaxed)
        }
        lookedAgain.store(again, ordering: .relaxed)
        let now = MonotonicClock.now()
        let took = now &- started
        let next = Self.nextLook(at: now, took: took, idleFactor: idleFactor, due: dueAt.load(ordering: .relaxed), again: again)
        restingUntil.store(next.restingUntil, ordering: .relaxed)
        dueAt.store(next.due, ordering: .relaxed)
        looked.add(1, ordering: .relaxed)
        guard looking.load(ordering: .relaxed) else { return }
        sink.yield(Look(finding: finding, again: again, took: .nanoseconds(Int64(took)), width: frame.width, height: frame.height))
    }

    /// When the next search may start, after one that ended at `now` (ns) having taken `took`:
    /// not before the CPU share's rest is over, and not before the frame `due` next, unless this
    /// search saw a shape worth looking `again` at, which is searched as soon as the rest is over.
    public static func nextLook(at now: UInt64, took: UInt64, idleFactor: Double, due: UInt64, again: Bool) -> (
        restingUntil: UInt64, due: UInt64
    ) {
        let restingUntil = now &+ UInt64(Double(took) * idleFactor)
        return (restingUntil, again ? min(due, restingUntil) : due)
    }
}
