import Foundation
import Synchronization
import GuidanceProtocol
public import HAL
public import Logging
import NIOPosix
public import ServiceLifecycle
import UTC

/// The G-sensor's part of the agent: reads the accelerometer on a thread of its own, runs
/// ``IncidentDetector``, and for each incident protects the segments of its window as they are
/// written (``RecordingStore/protect(_:now:)``), tells the server (``Uplink/report(_:)``), and
/// once it is over says "Incident saved." with the incident's haptic pattern. The incidents are
/// listed in `status` and kept in `protected/incidents.json`, so a restart still lists them.
///
/// A sensor that is missing or fails is retried every ``retryInterval``; recording never waits
/// for it.
public struct IncidentService: Service {
    public struct Settings: Sendable {
        public var detector: IncidentDetector.Settings
        public var hz: Int
        public var segmentSeconds: Int
    }

    /// Incidents `status` lists, newest first, and `incidents.json` keeps.
    public static let listed = 20
    public static let retryInterval = Duration.seconds(5)
    public static let fileName = "incidents.json"

    let settings: Settings
    let open: @Sendable () throws(AccelerometerError) -> any Accelerometer
    let store: RecordingStore
    let uplink: Uplink?
    let board: StatusBoard
    let announce: @Sendable (StatusPhrase) async -> Void
    let vibrate: @Sendable () -> Void
    let logger: Logger
    /// While the car is parked, impacts (at `parking.sensitivity`) record a parked clip instead.
    var parked: ParkedImpacts?
    /// Each saved incident's evidence goes to the owner.
    var clips: EventClips?

    /// What an impact does while the car is parked: the parked watch records a clip with its
    /// pre-roll (no continuous recording runs to protect).
    public struct ParkedImpacts: Sendable {
        public var isParked: @Sendable () -> Bool
        public var detector: IncidentDetector.Settings
        public var impact: @Sendable () -> Void

        public init(isParked: @escaping @Sendable () -> Bool, detector: IncidentDetector.Settings, impact: @escaping @Sendable () -> Void) {
            self.isParked = isParked
            self.detector = detector
            self.impact = impact
        }
    }

    public init(
        settings: Settings, open: @escaping @Sendable () throws(AccelerometerError) -> any Accelerometer, store: RecordingStore,
        uplink: Uplink?, board: StatusBoard, announce: @escaping @Sendable (StatusPhrase) async -> Void,
        vibrate: @escaping @Sendable () -> Void, logger: Logger
    ) {
        self.settings = settings
        self.open = open
        self.store = store
        self.uplink = uplink
        self.board = board
        self.announce = announce
        self.vibrate = vibrate
        self.logger = logger
    }

    /// The incidents listed, newest first: the status and `incidents.json` are written from it,
    /// one change at a time.
    final class Listing: Sendable {
        private let list: Mutex<[AgentStatus.Incidents.Incident]>
        init(_ list: [AgentStatus.Incidents.Incident]) { self.list = Mutex(list) }

        /// Puts `entry` in place of the one with its id (or first), and returns the list.
        func put(_ entry: AgentStatus.Incidents.Incident, then write: ([AgentStatus.Incidents.Incident]) -> Void) {
            list.withLock { list in
                list.removeAll { $0.id == entry.id }
                list.insert(entry, at: 0)
                if list.count > IncidentService.listed { list.removeLast(list.count - IncidentService.listed) }
                write(list)
            }
        }
    }

    enum Event: Sendable {
        case opened(String, mode: String)
        case reading(Acceleration)
        case failed(AccelerometerError)
    }

    public func run() async throws {
        let saved = Self.load(from: store.root)
        board.update { status in
            status.incidents = .init(sensitivity: settings.detector.sensitivity.rawValue, state: "starting", hz: settings.hz)
            status.incidents?.list = saved
        }
        let (events, sink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(4 * settings.hz))
        let stop = StopFlag()
        let reader = try NamedThread.start(name: "gsensor") { [settings, open] in
            Self.read(hz: settings.hz, open: open, stop: stop, sink: sink)
        }
        defer {
            stop.set()
            reader.join()
        }
        var detector = IncidentDetector(settings: settings.detector)
        var firstImpacts = FirstImpacts(wallClock: Self.wallClock)
        var parkedDetector = parked.map { IncidentDetector(settings: $0.detector) }
        var failures = RateLimit(interval: .seconds(60))
        let listing = Listing(saved)
        await withDiscardingTaskGroup { group in
            for await event in events.cancelOnGracefulShutdown() {
                var actions: [IncidentDetector.Action] = []
                switch event {
                case .opened(let name, let mode):
                    logger.info(
                        "g-sensor: reading \(name) at \(settings.hz) Hz (\(mode)), sensitivity \(settings.detector.sensitivity.rawValue)")
                    board.update {
                        $0.incidents?.sensor = name
                        $0.incidents?.state = "watching"
                        $0.incidents?.problem = nil
                    }
                case .reading(let reading):
                    if let parked, parked.isParked(), detector.open == nil, parkedDetector != nil {
                        for action in parkedDetector!.read(reading) {
                            switch action {
                            case .opened(let impact), .extended(let impact):
                                logger.notice(
                                    "g-sensor: impact while parked (\(impact.impacts) so far, peak \(impact.peakG) g); recording a clip")
                                parked.impact()
                            case .closed:
                                break
                            }
                        }
                        continue
                    }
                    actions = detector.read(reading)
                case .failed(let error):
                    if failures.allows(now: MonotonicClock.now()) {
                        logger.error("g-sensor: \(error); trying again every \(Self.retryInterval)")
                    }
                    board.update {
                        $0.incidents?.state = "failing"
                        $0.incidents?.problem = error.description
                    }
                    actions = detector.tick(now: MonotonicClock.now())
                }
                for action in actions {
                    let at = firstImpacts.time(of: action)
                    await perform(action, at: at, listing: listing)
                    // Its last segment is written up to a segment's time later: the readings go on meanwhile.
                    if case .closed(let incident) = action { group.addTask { await finish(incident, at: at, listing: listing) } }
                }
            }
            // Stopping: the recording stops too, so an incident waiting for its last segment waits no more.
            group.cancelAll()
        }
        // Stopping: an incident still open keeps what has been protected so far.
        if let open = detector.open { await finish(open, at: firstImpacts.time(of: open), listing: listing, stopping: true) }
    }

    /// The reading loop, on its own thread: a reading every 1/hz s, each on the monotonic clock.
    static func read(
        hz: Int, open: @Sendable () throws(AccelerometerError) -> any Accelerometer, stop: StopFlag,
        sink: AsyncStream<Event>.Continuation
    ) {
        let period = UInt64(1_000_000_000 / max(1, hz))
        var sensor: (any Accelerometer)?
        var next = MonotonicClock.now()
        while !stop.value {
            do throws(AccelerometerError) {
                if sensor == nil {
                    let opened = try open()
                    sensor = opened
                    sink.yield(.opened(opened.name, mode: opened.mode))
                }
                if let sensor {
                    for reading in try sensor.readings() { sink.yield(.reading(reading)) }
                }
                next += period
                let now = MonotonicClock.now()
                // Behind by more than a reading (a slow bus): start the pace again from now.
                if next + period < now { next = now }
                MonotonicClock.sleep(until: next)
            } catch {
                sensor = nil
                sink.yield(.failed(error))
                // Wakes every 100 ms to see whether the agent is stopping.
                let until = MonotonicClock.now() + UInt64(retryInterval.components.seconds) * 1_000_000_000
                while !stop.value, MonotonicClock.now() < until { MonotonicClock.sleep(until: MonotonicClock.now() + 100_000_000) }
                next = MonotonicClock.now()
            }
        }
        sink.finish()
    }

    // MARK: - Performing the detector's actions

    /// An incident opened or grew: its window protected, listed, and told to the server.
    private func perform(_ action: IncidentDetector.Action, at: Date, listing: Listing) async {
        switch action {
        case .opened(let incident):
            logger.notice(
                "g-sensor: incident: \(Self.g(incident.peakG)) g; protecting from \(settings.detector.before) before to \(settings.detector.after) after"
            )
            await record(incident, at: at, state: "open", listing: listing)
        case .extended(let incident):
            logger.info("g-sensor: incident goes on: \(incident.impacts) impact(s), peak \(Self.g(incident.peakG)) g")
            await record(incident, at: at, state: "open", listing: listing)
        case .closed(let incident):
            await protect(incident)
        }
    }

    /// An incident is over: once its last segment is written, listed as saved, told to the
    /// server, and to the driver ("Incident saved." and the pattern) unless the agent is stopping.
    private func finish(_ incident: IncidentDetector.Incident, at: Date, listing: Listing, stopping: Bool = false) async {
        // (`record` protects the final window, stopping or not.)
        if !stopping { await waitForSegments(until: Self.wallClock(incident.end)) }
        let entry = await record(incident, at: at, state: "saved", listing: listing)
        logger.notice(
            "g-sensor: incident saved: \(incident.impacts) impact(s), peak \(Self.g(incident.peakG)) g, \(entry.files.count) segment(s) from \(entry.from) to \(entry.to)"
        )
        clips?.record(
            .incident(
                id: entry.id, at: at, from: Self.wallClock(incident.start), to: Self.wallClock(incident.end),
                peakG: entry.peakG, paths: entry.files))
        guard !stopping, !Task.isCancelled else { return }
        await announce(.incidentSaved)
        vibrate()
    }

    private func protect(_ incident: IncidentDetector.Incident) async {
        let from = Self.wallClock(incident.start), to = Self.wallClock(incident.end)
        do {
            // Moves and fsyncs: on the blocking pool. A range that reaches past the newest segment
            // protects the segments still to come as they are written.
            _ = try await NIOThreadPool.singleton.runIfActive { [store] in try store.protect(.time(from...to)) }
        } catch {
            logger.error("g-sensor: cannot protect the incident's segments: \(error)")
        }
    }

    /// Protects the window (again: it may have grown), lists it with its protected files, keeps
    /// the list on disk and tells the server. `at`, its first impact's wall-clock time, is its id.
    @discardableResult
    private func record(_ incident: IncidentDetector.Incident, at: Date, state: String, listing: Listing) async
        -> AgentStatus.Incidents.Incident
    {
        await protect(incident)
        let from = Self.wallClock(incident.start), to = Self.wallClock(incident.end)
        let segments = store.segments(overlapping: from...to).filter(\.isProtected)
        let entry = AgentStatus.Incidents.Incident(
            id: UTCTime(at).basic, at: UTCTime(at).rfc3339, peakG: (incident.peakG * 100).rounded() / 100, impacts: incident.impacts,
            from: UTCTime(from).rfc3339, to: UTCTime(to).rfc3339, state: state, files: segments.map(\.path))
        _ = try? await NIOThreadPool.singleton.runIfActive { [board, logger] in
            listing.put(entry) { list in
                board.update { $0.incidents?.list = list }
                Self.save(list, in: store.root, logger: logger)
            }
        }
        await uplink?.report(
            ClientMessage.Incident(
                id: entry.id, at: entry.at, from: entry.from, to: entry.to, peakG: entry.peakG,
                seqs: segments.suffix(ClientMessage.Incident.maxSeqs).map(\.seq), final: state == "saved"))
        return entry
    }

    /// Until the recording has written the segment that holds `end` (``RecordingStore/waitForSegments(until:segmentSeconds:within:)``).
    private func waitForSegments(until end: Date) async {
        await store.waitForSegments(until: end, segmentSeconds: settings.segmentSeconds, within: Self.finishWait)
    }

    /// The longest an incident waits for its last segment before it is saved with what is there.
    public static let finishWait = Duration.seconds(120)

    private static func save(_ list: [AgentStatus.Incidents.Incident], in root: URL, logger: Logger) {
        let folder = root.appendingPathComponent(StoredSegment.protectedFolder)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try RecordingFiles.write(Array(try encoder.encode(list)), to: folder.appendingPathComponent(Self.fileName))
        } catch {
            logger.error("g-sensor: cannot write \(Self.fileName): \(error)")
        }
    }

    /// The incidents an earlier run kept; those whose files are all gone are left out.
    static func load(from root: URL) -> [AgentStatus.Incidents.Incident] {
        let file = root.appendingPathComponent(StoredSegment.protectedFolder).appendingPathComponent(fileName)
        guard let data = try? Data(contentsOf: file),
            let list = try? JSONDecoder().decode([AgentStatus.Incidents.Incident].self, from: data)
        else { return [] }
        return list.prefix(listed).filter { incident in
            incident.files.contains { FileManager.default.fileExists(atPath: root.appendingPathComponent($0).path) }
        }
    }

    /// The wall-clock time of each incident's first impact, read once, when it opened: the
    /// incident's id and `at` in the list, in `incidents.json` and on the server. Read again at
    /// each record it came out a millisecond later on a busy board (the monotonic clock and the
    /// wall clock are read one after the other), and the list had the incident twice: once
    /// saved, once open for ever.
    struct FirstImpacts {
        let wallClock: (UInt64) -> Date
        /// The detector's one open incident, by number, and its time.
        private var open: (number: Int, at: Date)?

        init(wallClock: @escaping (UInt64) -> Date) { self.wallClock = wallClock }

        /// The time of the incident the action is about; a closed one is forgotten.
        mutating func time(of action: IncidentDetector.Action) -> Date {
            switch action {
            case .opened(let incident), .extended(let incident):
                return time(of: incident)
            case .closed(let incident):
                let at = time(of: incident)
                open = nil
                return at
            }
        }

        /// The time of an incident still open: read now if it is new.
        mutating func time(of incident: IncidentDetector.Incident) -> Date {
            if let open, open.number == incident.number { return open.at }
            let at = wallClock(incident.firstImpact)
            open = (incident.number, at)
            return at
        }
    }

    /// The wall-clock time of a monotonic instant, as of now.
    static func wallClock(_ monotonic: UInt64) -> Date {
        let now = MonotonicClock.now()
        let ago = now >= monotonic ? -Double(now - monotonic) : Double(monotonic - now)
        return Date(timeIntervalSinceNow: ago / 1e9)
    }

    static func g(_ value: Double) -> String { String(format: "%.2f", value) }
}
