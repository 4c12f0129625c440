import GuidanceProtocol
import Synchronization
public import HAL
public import Logging
public import ServiceLifecycle

/// Parking mode: reads the ignition on a thread of its own, runs ``ParkingRules``, and switches
/// the agent between driving and parked.
///
/// Parked: the pipeline stops continuous recording and watches the parked car
/// (``CapturePipeline/park()``: the camera at `parking.fps`, clips on motion and on impact with
/// their pre-roll, protected), and the uplink closes its session (``Uplink/park()``). Ignition
/// on: both resume, and the driver hears how many clips were saved while parked.
///
/// An input that fails is read again every ``retryInterval``; the mode stays as it was meanwhile.
public struct ParkingService: Service {
    public static let retryInterval = Duration.seconds(5)

    let rules: ParkingRules.Settings
    let open: @Sendable () throws -> any InputLine
    let pipeline: CapturePipeline
    let uplink: Uplink?
    let board: StatusBoard
    let announce: @Sendable (StatusPhrase) async -> Void
    let logger: Logger
    /// Shared with the recording (clips saved) and the G-sensor (is the car parked).
    public let state: ParkingState

    public init(
        rules: ParkingRules.Settings, open: @escaping @Sendable () throws -> any InputLine, pipeline: CapturePipeline,
        uplink: Uplink?, board: StatusBoard, announce: @escaping @Sendable (StatusPhrase) async -> Void, logger: Logger
    ) {
        self.rules = rules
        self.open = open
        self.pipeline = pipeline
        self.uplink = uplink
        self.board = board
        self.announce = announce
        self.logger = logger
        state = ParkingState(rules: ParkingRules(settings: rules))
    }

    enum Event: Sendable {
        case opened(String)
        case level(Bool, at: UInt64)
        case tick(UInt64)
        case failed(String)
    }

    public func run() async throws {
        let (events, sink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(64))
        let stop = StopFlag()
        let reader = try NamedThread.start(name: "ignition") { [open, state] in
            Self.read(open: open, nextDeadline: { state.nextDeadline }, stop: stop, sink: sink)
        }
        defer {
            stop.set()
            reader.join()
        }
        var failures = RateLimit(interval: .seconds(60))
        var clipsBefore = 0
        for await event in events.cancelOnGracefulShutdown() {
            let actions: [ParkingRules.Action]
            switch event {
            case .opened(let name):
                logger.info("parking: reading the ignition on \(name)")
                board.update {
                    $0.parking?.input = name; $0.parking?.problem = nil
                }
                continue
            case .level(let level, let now):
                actions = state.read(level, at: now)
            case .tick(let now):
                actions = state.tick(at: now)
            case .failed(let problem):
                if failures.allows(now: MonotonicClock.now()) {
                    logger.error("parking: \(problem); trying again every \(Self.retryInterval)")
                }
                board.update { $0.parking?.problem = problem }
                continue
            }
            let frames = pipeline.parkedFrames
            board.update {
                $0.parking?.ignition = state.ignition.map { $0 ? "on" : "off" }
                $0.parking?.framesWatched = frames
            }
            for action in actions { await perform(action, clipsBefore: &clipsBefore) }
        }
    }

    /// A parked clip was written (its path in the recording folder): counted and shown.
    public var clipSaved: @Sendable (String) -> Void {
        { [state, board] path in
            state.clipSaved()
            let events = state.events
            board.update {
                $0.parking?.events = events
                $0.parking?.eventsTotal += 1
                $0.parking?.lastClip = path
            }
        }
    }

    /// `clipsBefore`: the pipeline's clip count when the car was parked.
    private func perform(_ action: ParkingRules.Action, clipsBefore: inout Int) async {
        switch action {
        case .park:
            clipsBefore = pipeline.parkedClips
            logger.notice("parking: ignition off for \(rules.delayNs / 1_000_000_000) s; parking mode")
            pipeline.park()
            await uplink?.park()
            board.update {
                $0.parking?.mode = "parked"
                $0.parking?.events = 0
                $0.camera.state = "parked"
            }
        case .drive(let saved):
            // A clip the ignition cut short is written just after: it counts.
            let events = max(saved, pipeline.parkedClips - clipsBefore)
            logger.notice("parking: ignition on; driving mode", metadata: ["parkingEvents": "\(events)"])
            pipeline.drive()
            await uplink?.drive()
            board.update {
                $0.parking?.mode = "driving"
                $0.camera.state = "recording"
            }
            await announce(.parkingEvents(events))
        }
    }

    /// The ignition's thread: the level at each edge, and at least once a second; a tick at each
    /// deadline of the rules.
    static func read(
        open: @Sendable () throws -> any InputLine, nextDeadline: @Sendable () -> UInt64?, stop: StopFlag,
        sink: AsyncStream<Event>.Continuation
    ) {
        var input: (any InputLine)?
        defer { input?.release() }
        while !stop.value {
            do {
                if input == nil {
                    let opened = try open()
                    input = opened
                    sink.yield(.opened(opened.description))
                }
                guard let line = input else { continue }
                sink.yield(.level(try line.isActive(), at: MonotonicClock.now()))
                let now = MonotonicClock.now()
                var wait: UInt64 = 1_000_000_000
                if let deadline = nextDeadline() { wait = deadline > now ? min(wait, deadline - now) : 1_000_000 }
                _ = try line.waitForChange(timeoutNs: Int64(wait))
                sink.yield(.tick(MonotonicClock.now()))
            } catch {
                sink.yield(.failed("\(error)"))
                input?.release()
                input = nil
                let until = MonotonicClock.now() + UInt64(retryInterval.components.seconds) * 1_000_000_000
                while !stop.value && MonotonicClock.now() < until {
                    MonotonicClock.sleep(until: min(until, MonotonicClock.now() + 100_000_000))
                }
            }
        }
        sink.finish()
    }
}

/// The rules' state, shared: the service decides, the recording counts clips, the G-sensor asks
/// whether the car is parked.
public final class ParkingState: Sendable {
    private let rules: Mutex<ParkingRules>
    private let parked = Atomic<Bool>(false)

    init(rules: ParkingRules) { self.rules = Mutex(rules) }

    public var isParked: Bool { parked.load(ordering: .relaxed) }
    var ignition: Bool? { rules.withLock { $0.ignition } }
    var nextDeadline: UInt64? { rules.withLock { $0.nextDeadline } }

    func read(_ level: Bool, at now: UInt64) -> [ParkingRules.Action] { apply { $0.read(level, at: now) } }
    func tick(at now: UInt64) -> [ParkingRules.Action] { apply { $0.tick(at: now) } }

    /// A parked clip was written: counted for this parking.
    public func clipSaved() { rules.withLock { $0.eventSaved() } }
    public var events: Int { rules.withLock { $0.events } }

    private func apply(_ step: (inout ParkingRules) -> [ParkingRules.Action]) -> [ParkingRules.Action] {
        rules.withLock { rules in
            let actions = step(&rules)
            parked.store(rules.mode == .parked, ordering: .relaxed)
            return actions
        }
    }
}
