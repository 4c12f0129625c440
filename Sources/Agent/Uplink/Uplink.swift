import Foundation
public import GuidanceProtocol
public import HAL
public import Logging
import NIOCore
import NIOPosix
public import NIOSSL
import UTC

/// Streams segments to the guidance server and hands its answers back.
///
/// ``Uplink/StateMachine`` holds every rule (when to open or give up a session, what to send or
/// re-send, pauses, stale guidance, the shutdown drain); this actor performs its actions. Each
/// session runs in a child task of ``run(networkChanges:)`` that can be cancelled at any point,
/// including in the middle of a blocked write. `enqueue(_:)` never waits for the network.
public actor Uplink {
    public struct Settings: Sendable {
        public var url: String
        public var token: TokenSource
        /// `nil` for `ws://`.
        public var tls: TLSConfiguration?
        public var hello: ClientMessage.Hello
        /// Connect, TLS handshake and upgrade together.
        public var connectTimeout: Duration
        /// Where clips are kept until stored (nil: the car keeps no recording, so it has no clips).
        public var clipCustody: ClipCustody?
        /// Every rule's numbers: pings and liveness, backoff, the queue, the drain, the clips'
        /// budget. The segments' pace is the `hello`'s when the rules name none.
        public var rules: StateMachine.Settings

        public static let standardConnectTimeout: Duration = .seconds(5)

        public init(
            url: String, token: TokenSource, tls: TLSConfiguration?, hello: ClientMessage.Hello,
            connectTimeout: Duration = standardConnectTimeout, clipCustody: ClipCustody? = nil,
            rules: StateMachine.Settings = .init()
        ) {
            self.url = url
            self.token = token
            self.tls = tls
            self.hello = hello
            self.connectTimeout = connectTimeout
            self.clipCustody = clipCustody
            self.rules = rules
            if self.rules.segmentPeriod == nil, hello.video.segmentMs > 0 {
                self.rules.segmentPeriod = .milliseconds(hello.video.segmentMs)
            }
        }
    }

    public struct Stats: Sendable, Equatable {
        public var sent = 0
        /// Of `sent`: segments sent again on a later session because the earlier one never acknowledged them.
        public var resent = 0
        public var acked = 0
        public var dropped = 0
        public var staleGuidance = 0
        public var reconnects = 0
        public var sessions = 0
    }

    /// Where the connection to the server stands; the driver hears about the changes.
    public enum ConnectionState: Sendable, Equatable {
        case connecting
        case connected(session: String)
        /// The session ended or could not open; the next attempt is in `retryIn`.
        case disconnected(retryIn: Duration)
        /// The server refused the device token; the next attempt is in `retryIn`.
        case authenticationFailed(retryIn: Duration)
        /// There is no token to send (`uplink.tokenFile` missing, empty, unreadable or open to
        /// others): `problem` says which; the file is read again in `retryIn`.
        case noToken(problem: String, retryIn: Duration)
        case stopped
        /// The car is parked: no session until it drives again.
        case parked
    }

    /// Every readable server message, in order (stale guidance excluded).
    public nonisolated let messages: AsyncStream<ServerMessage>
    private let messageSink: AsyncStream<ServerMessage>.Continuation
    /// Every change of ``state``, in order.
    public nonisolated let states: AsyncStream<ConnectionState>
    private let stateSink: AsyncStream<ConnectionState>.Continuation

    public var state: ConnectionState { machine.state }
    public var stats: Stats { machine.stats }
    /// Uploads stop on 4402 until usage comes back; recording goes on.
    public var paused: Bool { machine.paused }
    /// When the current session opened, if one is open.
    public var sessionOpenedAt: ContinuousClock.Instant? {
        machine.sessionOpenedAt.map { .now - .nanoseconds(Int64(clamping: MonotonicClock.now() &- $0)) }
    }

    private let settings: Settings
    private let logger: Logger
    private var machine: StateMachine
    private var sessions: [SessionID: SessionHandle] = [:]
    private let (spawns, spawnSink) = AsyncStream.makeStream(of: SessionID.self)
    private var finishedWaiters: [CheckedContinuation<Void, Never>] = []
    /// The clips in custody, by id: where their files are.
    private var clipEntries: [String: ClipCustody.Entry] = [:]
    private var clipsStored = 0

    /// What the actor keeps of a running session.
    private struct SessionHandle {
        let control: AsyncStream<SessionControl>.Continuation
        let wake: AsyncStream<Void>.Continuation
        let wakes: AsyncStream<Void>
        let controls: AsyncStream<SessionControl>
        var connection: WebSocketConnection?
    }

    private enum SessionControl: Sendable {
        case close(CloseCode, grace: Duration)
        case cancel
    }

    public init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        self.machine = StateMachine(settings: settings.rules)
        (messages, messageSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
        (states, stateSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
    }

    /// Takes a finished segment into custody; drops the oldest when over a bound.
    public func enqueue(_ segment: Segment) {
        perform(machine.segment(segment, now: MonotonicClock.now()))
    }

    /// Tells the server of an incident (``StateMachine/incident(_:now:)``).
    public func report(_ incident: ClientMessage.Incident) {
        perform(machine.incident(incident, now: MonotonicClock.now()))
    }

    /// The car is parked: the session closes and none opens until ``drive()``.
    public func park() {
        perform(machine.park(now: MonotonicClock.now()))
    }

    /// Driving again: a session opens at once.
    public func drive() {
        perform(machine.drive(now: MonotonicClock.now()))
    }

    /// A token (a paired car's credentials) is there now: connect without waiting for the retry.
    public func tokenAvailable() {
        perform(machine.tokenAvailable(now: MonotonicClock.now()))
    }

    /// A clip for the owner: kept on the card (``ClipCustody``) before it is first announced,
    /// then uploaded between segments until the server has stored it.
    public func upload(_ entry: ClipCustody.Entry) async {
        if let custody = settings.clipCustody {
            do {
                try await NIOThreadPool.singleton.runIfActive { try custody.keep(entry) }
            } catch {
                // Still sent while the agent runs; only a restart would forget it.
                logger.error("uplink: cannot keep clip \(entry.clip.id) on the card: \(error); it is uploaded, but not after a restart")
            }
        }
        clipEntries[entry.clip.id] = entry
        logger.notice(
            "uplink: clip \(entry.clip.id) (\(entry.clip.kind), \(entry.clip.files.count) file(s), \(entry.clip.files.reduce(0) { $0 + $1.bytes }) bytes) to upload"
        )
        perform(machine.clip(entry.clip, now: MonotonicClock.now()))
    }

    /// The clips waiting, for `status`.
    public var uploads: AgentStatus.Uploads {
        let local = Self.localDay()
        var status = AgentStatus.Uploads(
            waitingFor: machine.clips.whyWaiting(segmentsWaiting: !machine.custody.unsent.isEmpty).rawValue,
            when: settings.rules.clips.wifiOnly ? "wifi" : "always", dailyBytes: settings.rules.clips.dailyBytes)
        status.waiting = machine.clips.waiting.map { .init(id: $0.id, kind: $0.clip.kind, at: $0.clip.at, bytesLeft: $0.bytesLeft) }
        status.bytesToday = machine.clips.bytesToday(on: local)
        status.stored = clipsStored
        return status
    }

    /// The local calendar day, in days since 1970: the day `upload.dailyMegabytes` counts.
    static func localDay(_ date: Date = Date(), zone: TimeZone = .current) -> Int {
        Int(((date.timeIntervalSince1970 + Double(zone.secondsFromGMT(for: date))) / 86_400).rounded(.down))
    }

    /// The clips an earlier run kept and the server has not stored yet.
    private func loadClips() async {
        guard let custody = settings.clipCustody else { return }
        guard let (entries, unreadable) = try? await NIOThreadPool.singleton.runIfActive({ custody.all() }) else { return }
        for path in unreadable { logger.error("uplink: \(path) is not a clip this agent can read; left on the card, not uploaded") }
        if !entries.isEmpty { logger.notice("uplink: \(entries.count) clip(s) kept from before still to upload") }
        for entry in entries where clipEntries[entry.clip.id] == nil {
            clipEntries[entry.clip.id] = entry
            perform(machine.clip(entry.clip, now: MonotonicClock.now()))
        }
    }

    /// Runs sessions until ``shutdown()`` has drained; each network change opens a new session.
    /// `path`: the network as it is at the start (for `upload.when: wifi`).
    public func run(
        networkChanges: AsyncStream<NetworkChange>, path: NetworkPath? = nil,
        isWireless: @escaping @Sendable (NetworkPath) -> Bool = WirelessLAN.carries
    ) async {
        if let path { perform(machine.network(wifi: isWireless(path))) }
        await loadClips()
        await withDiscardingTaskGroup { group in
            group.addTask { [self] in
                for await change in networkChanges {
                    await self.perform { $0.network(wifi: isWireless(change.new)) + $0.networkChanged("\(change)", now: $1) }
                }
            }
            group.addTask { [self] in await self.tickUntilCancelled() }
            perform(machine.start(now: MonotonicClock.now()))
            for await id in spawns {
                guard let handle = sessions[id] else { continue }
                group.addTask { [self] in await self.runSession(id, controls: handle.controls, wakes: handle.wakes) }
            }
            group.cancelAll()
        }
        messageSink.finish()
        stateSink.finish()
        for waiter in finishedWaiters { waiter.resume() }
        finishedWaiters.removeAll()
    }

    /// Sends what is held, waits up to `settings.rules.drain` for its acknowledgements and guidance,
    /// then closes the session with 1001. Returns once ``run(networkChanges:)`` has ended.
    public func shutdown() async {
        guard !machine.isFinished else { return }
        perform(machine.shutdown(now: MonotonicClock.now()))
        guard !machine.isFinished else { return }
        await withCheckedContinuation { finishedWaiters.append($0) }
    }

    // MARK: - Performing the machine's actions

    private func perform(_ event: @Sendable (inout StateMachine, UInt64) -> [StateMachine.Action]) {
        perform(event(&machine, MonotonicClock.now()))
    }

    private func perform(_ actions: [StateMachine.Action]) {
        for action in actions {
            switch action {
            case .connect(let id):
                let (controls, control) = AsyncStream.makeStream(of: SessionControl.self, bufferingPolicy: .bufferingOldest(4))
                let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                sessions[id] = SessionHandle(control: control, wake: wake, wakes: wakes, controls: controls)
                spawnSink.yield(id)
            case .wakeSender(let id):
                sessions[id]?.wake.yield()
            case .close(let id, let code, let grace):
                sessions[id]?.control.yield(.close(code, grace: grace))
            case .cancel(let id):
                sessions[id]?.control.yield(.cancel)
                sessions[id]?.control.finish()
            case .report(let state):
                stateSink.yield(state)
            case .deliver(let message):
                messageSink.yield(message)
            case .log(let level, let text):
                logger.log(level: level, "uplink: \(text)")
            case .clipStored(let id):
                if clipEntries.removeValue(forKey: id) != nil { clipsStored += 1 }
                settings.clipCustody?.release(id)
            case .finish:
                spawnSink.finish()
            }
        }
    }

    private func tickUntilCancelled() async {
        while !Task.isCancelled {
            let now = MonotonicClock.now()
            // Wake for the next deadline, and at least every 100 ms for those set meanwhile.
            let wait = machine.nextDeadline.map { $0 > now ? min($0 - now, 100_000_000) : 0 } ?? 100_000_000
            if wait > 0 { try? await Task.sleep(for: .nanoseconds(Int64(wait))) }
            perform { $0.tick(now: $1) }
        }
    }

    // MARK: - One session

    /// Connects, says hello, then sends, pings and receives until the connection ends or the
    /// machine closes or cancels it. A cancel ends every part of it at once.
    private nonisolated func runSession(_ id: SessionID, controls: AsyncStream<SessionControl>, wakes: AsyncStream<Void>) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.sessionBody(id, wakes: wakes) }
            group.addTask {
                for await control in controls {
                    switch control {
                    case .cancel: return
                    case .close(let code, let grace):
                        await self.connection(id)?.close(code: code.rawValue, reason: "going away", grace: grace)
                    }
                }
            }
            _ = await group.next()
            group.cancelAll()
        }
        await forget(id)
    }

    private nonisolated func sessionBody(_ id: SessionID, wakes: AsyncStream<Void>) async {
        let token: String
        do {
            token = try await settings.token.read()
        } catch {
            if !Task.isCancelled { await perform { $0.connectFailed(id, .noToken(error.description), now: $1) } }
            return
        }
        let connection: WebSocketConnection
        do {
            connection = try await WebSocketConnection.connect(connectOptions(token: token), logger: logger)
        } catch {
            if !Task.isCancelled { await perform { $0.connectFailed(id, error.failure, now: $1) } }
            return
        }
        defer { connection.abort() }
        guard await adopt(connection, for: id) else { return }
        do {
            try await connection.send(text: ClientMessage.hello(settings.hello).encoded())
        } catch {
            await perform { $0.ended(id, code: nil, now: $1) }
            return
        }
        await perform { $0.opened(id, now: $1) }
        var closeCode: UInt16?
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.sendLoop(id, connection: connection, token: token, wakes: wakes) }
            group.addTask { await self.pingLoop(connection) }
            group.addTask { await self.authTicks(id) }
            for await inbound in connection.inbound {
                switch inbound {
                case .text(let text): await receive(text, on: id)
                case .binary: logger.warning("uplink: ignoring a binary message from the server")
                case .pong:
                    await perform {
                        $0.heard(id, now: $1); return []
                    }
                case .closed(let code, _): closeCode = code
                }
            }
            group.cancelAll()
        }
        let code = closeCode
        if !Task.isCancelled { await perform { $0.ended(id, code: code, now: $1) } }
    }

    private nonisolated func connectOptions(token: String) -> WebSocketConnectOptions {
        WebSocketConnectOptions(
            url: settings.url, headers: [("Authorization", "Bearer \(token)")], tls: settings.tls,
            deadline: settings.connectTimeout, userTimeout: settings.rules.liveness,
            maxMessageBytes: GuidanceProtocol.maxMessageBytes)
    }

    private func adopt(_ connection: WebSocketConnection, for id: SessionID) -> Bool {
        guard sessions[id] != nil else { return false }
        sessions[id]?.connection = connection
        return true
    }

    private func connection(_ id: SessionID) -> WebSocketConnection? { sessions[id]?.connection }

    private func forget(_ id: SessionID) {
        sessions[id]?.connection?.abort()
        sessions[id] = nil
    }

    private nonisolated func pingLoop(_ connection: WebSocketConnection) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: settings.rules.ping)
            guard !Task.isCancelled, (try? await connection.ping()) != nil else { return }
        }
    }

    // MARK: - Sending

    /// Wakes the sender every ``authCheck``, so a paired car's access token is renewed in the
    /// session (an `auth` message) before it runs out, also while nothing is sent.
    private nonisolated func authTicks(_ id: SessionID) async {
        guard case .fileOrPaired = settings.token else { return }
        while !Task.isCancelled {
            try? await Task.sleep(for: Self.authCheck)
            await sessions[id]?.wake.yield()
        }
    }

    static let authCheck = Duration.seconds(20)

    private nonisolated func sendLoop(_ id: SessionID, connection: WebSocketConnection, token: String, wakes: AsyncStream<Void>) async {
        var token = token
        for await _ in wakes {
            // Between segments, never between a header and its chunks: the token the session
            // runs on, renewed when it is about to run out (a static token never changes here).
            if case .fileOrPaired = settings.token, let fresh = try? await settings.token.read(), fresh != token {
                do {
                    try await connection.send(text: ClientMessage.auth(.init(token: fresh)).encoded())
                    token = fresh
                    logger.debug("uplink: access token renewed in the session")
                } catch {
                    return
                }
            }
            // Incidents first: the server keeps their segments, also those it is about to get.
            for incident in await incidentsToSend(id) {
                do {
                    try await connection.send(text: ClientMessage.incident(incident).encoded())
                } catch {
                    return
                }
            }
            // Segments, then one clip message, then segments again: a part goes only when no
            // segment waits, so a segment waits behind at most one part (64 KiB).
            while true {
                while let segment = await nextToSend(id) {
                    do {
                        try await send(segment, connection: connection)
                    } catch {
                        // The connection is going: the segment stays in flight and is re-sent on the next session.
                        return
                    }
                    await sent(segment, on: id)
                }
                guard let message = await nextClipMessage(id) else { break }
                do {
                    switch message {
                    case .announce(let clip):
                        try await connection.send(text: ClientMessage.clip(clip).encoded())
                    case .part(let part):
                        guard let bytes = await clipBytes(part) else { continue }
                        try await connection.send(text: ClientMessage.clipPart(part).encoded())
                        try await connection.send(binary: bytes[...])
                    }
                } catch {
                    // What the server did not answer is asked again on the next session.
                    return
                }
            }
        }
    }

    private func nextClipMessage(_ id: SessionID) -> ClipUploads.StateMachine.Send? {
        machine.nextClipMessage(session: id, day: Self.localDay(), now: MonotonicClock.now())
    }

    /// A part's bytes from the card; nil when the file is gone (the clip is given up: it can
    /// never be whole on the server).
    private func clipBytes(_ part: ClientMessage.ClipPart) async -> [UInt8]? {
        guard let entry = clipEntries[part.id] else {
            perform(machine.withdrawClip(part.id))
            return nil
        }
        let custody = settings.clipCustody ?? ClipCustody(root: URL(fileURLWithPath: "/nonexistent"))
        do {
            return try await NIOThreadPool.singleton.runIfActive { try custody.read(part, of: entry) }
        } catch {
            logger.error("uplink: clip \(part.id) cannot be uploaded: \(error); it stays on the card, the server does not get it")
            perform(machine.withdrawClip(part.id))
            return nil
        }
    }

    private func incidentsToSend(_ id: SessionID) -> [ClientMessage.Incident] {
        machine.incidentsToSend(session: id, now: MonotonicClock.now())
    }

    private func nextToSend(_ id: SessionID) -> Segment? {
        let (segment, actions) = machine.nextToSend(session: id, now: MonotonicClock.now())
        perform(actions)
        return segment
    }

    private func sent(_ segment: Segment, on id: SessionID) {
        machine.sent(session: id)
        let sinceClosedUs = MonotonicClock.now().subtractingReportingOverflow(segment.closedMonotonicNs).partialValue / 1000
        logger.debug(
            "uplink: segment \(segment.metadata.seq) sent, last byte written \(Double(sinceClosedUs) / 1000) ms after it closed",
            metadata: ["bytes": "\(segment.metadata.bytes)", "session": "\(id)"])
    }

    private nonisolated func send(_ segment: Segment, connection: WebSocketConnection) async throws {
        let m = segment.metadata
        let chunkSize = GuidanceProtocol.maxMessageBytes
        let header = ClientMessage.SegmentHeader(
            seq: m.seq, capturedAt: m.capturedAt.rfc3339Milliseconds,
            durationMs: m.durationMs, frames: m.frames, bytes: m.bytes, sha256: m.sha256,
            chunks: (segment.data.count + chunkSize - 1) / chunkSize,
            gps: segment.notes.gps.map { Array($0.suffix(ClientMessage.SegmentHeader.maxPositions)) })
        try await connection.send(text: ClientMessage.segment(header).encoded())
        for start in stride(from: 0, to: segment.data.count, by: chunkSize) {
            try await connection.send(binary: segment.data[start..<min(start + chunkSize, segment.data.count)])
        }
    }

    // MARK: - Receiving

    private var unreadable = RateLimit(interval: .seconds(10))

    private func receive(_ text: String, on id: SessionID) {
        let decoded: ServerMessage
        do {
            decoded = try ServerMessage.decode(text)
        } catch {
            machine.heard(id, now: MonotonicClock.now())
            if unreadable.allows(now: MonotonicClock.now()) { logger.warning("uplink: ignoring an unreadable server message: \(error)") }
            return
        }
        perform { $0.received(decoded, on: id, now: $1) }
    }
}

extension WebSocketConnectFailure {
    var failure: ConnectFailure {
        switch self {
        case .refused(let status, let retryAfter): .refused(status: status, retryAfter: retryAfter)
        case .timedOut: .timedOut
        case .failed(let reason): .unreachable(reason)
        }
    }
}
