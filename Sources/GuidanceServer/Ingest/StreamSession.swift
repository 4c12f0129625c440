import Dispatch
import Foundation
import GuidanceProtocol
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOPosix
import NIOWebSocket
import Synchronization

/// One agent's WebSocket session. Its protocol rules are ``StreamSession.StateMachine``'s; this carries
/// out what the machine decides: the lease (one session per device), the ledger (each segment
/// charged once, before its `ack`), analysis, usage, and the idle check.
///
/// Anything malformed is answered with an `error` message (or, before `hello`, a close with a
/// reason) and never ends the server or touches other sessions.
public struct StreamSession: Sendable {
    let id = UUID().uuidString
    let device: String
    let settings: StreamServer.Settings
    let sessions: LiveSessions
    let leases: any SessionLeases
    let ledger: any UsageLedger
    let analyzer: any SegmentAnalyzer
    let metrics: ServerMetrics
    let activity: ConnectionActivity
    /// How the session takes in bytes: room in the server's budget, its connection's read credit,
    /// and its place among the starting sessions.
    var intake = Intake()
    /// Whether the token the session was opened with still names its device (the tokens file is
    /// read again when it changes: `guidance-server token remove`).
    let stillAuthorized: @Sendable () -> Bool
    /// What a paired car's owner sees of it (last seen, last guidance); `nil` for static tokens.
    var observer: Observer? = nil
    /// Takes a new access token sent in the session (`auth`); `true` if it names this device and
    /// extends the session's authorization. A static token's session has nothing to renew.
    var reauthorize: @Sendable (String) -> Bool = { _ in false }
    let logger: Logger

    /// What bounds a session's intake, shared with the server and its connection.
    struct Intake: Sendable {
        /// Room for the segments being received, server-wide.
        var budget = InFlightBudget(capacity: Int.max)
        /// Tells the connection when the session is done with a message, so that it reads on; nil: NIO's read-ahead.
        var credit: ReadCredit.Taker?
        /// The session has started (its `welcome` is written): its place among the starting ones is free.
        var started: @Sendable () -> Void = {}
    }

    public struct Observer: Sendable {
        var opened: @Sendable () async -> Void
        var guided: @Sendable (String) async -> Void
        /// Whose room the car's clips take (``ClipQuota``), asked at each clip it announces.
        var clipAdmission: @Sendable () async -> ClipQuota.Admission = { .unlimited }
        /// A segment's GPS track, once, when the segment is first acknowledged.
        var tracked: @Sendable ([GPSPosition]) async -> Void = { _ in }
    }

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        metrics.sessionOpened()
        defer { metrics.sessionClosed() }
        let lease = Lease()
        let end = Ending()
        // Room taken for the segment being received, given back once it is acknowledged or refused
        // (or with the session).
        let room = Room(budget: intake.budget)
        defer { room.giveBack() }
        // Only the newest acknowledged segment waits for the analyzer: one that arrives while
        // another still waits takes its place (guidance about an older view of the road is stale).
        let (clips, waiting) = AsyncStream.makeStream(of: ReceivedSegment.self, bufferingPolicy: .bufferingNewest(1))
        // The first part to finish ends the session: the receive loop (the agent closed, or the
        // session closed itself), the idle watch (4001), a supersede (4000), the server's restart
        // (1012). The rest are cancelled, so a peer that went silent cannot keep a session, its
        // slot or its buffer.
        var failure: (any Error)?
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await watchIdle(outbound: outbound, room: room, lease: lease) }
                group.addTask { try await watchTokenAndUsage(lease: lease, outbound: outbound) }
                group.addTask { try await analyze(clips, outbound: outbound) }
                group.addTask { await endedFromOutside(end, outbound: outbound) }
                group.addTask {
                    defer { waiting.finish() }
                    try await receive(inbound: inbound, outbound: outbound, lease: lease, end: end, room: room, analysis: waiting)
                }
                defer { group.cancelAll() }
                try await group.next()
            }
        } catch {
            failure = error
        }
        // Every way out, a throw included, leaves the device free for its next session.
        end.finish()
        await sessions.remove(id)
        if let epoch = lease.epoch {
            do { try await leases.release(device: device, session: id, epoch: epoch) } catch {
                logger.warning("session \(id): cannot release its lease: \(error)", metadata: ["device": "\(device)"])
            }
        }
        logger.info("session \(id) ended", metadata: ["device": "\(device)"])
        if let failure { throw failure }
    }

    /// Why a session is ended from outside (``LiveSessions``).
    public enum EndReason: Sendable {
        /// A newer session of the device took over (4000).
        case superseded
        /// The server is shutting down (1012).
        case restarting
    }

    /// An end told from outside the session (``LiveSessions``): it only signals, never waits.
    final class Ending: Sendable {
        let signal: AsyncStream<EndReason>
        private let continuation: AsyncStream<EndReason>.Continuation
        init() { (signal, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1)) }
        func end(_ reason: EndReason) { continuation.yield(reason) }
        func finish() { continuation.finish() }
    }

    /// Waits for an end told from outside; then tells the agent (within ``closeDeadline``: a peer
    /// that stopped reading cannot hold it) and returns, which ends the session.
    private func endedFromOutside(_ end: Ending, outbound: WebSocketOutboundWriter) async {
        for await reason in end.signal {
            switch reason {
            case .superseded:
                logger.info("session \(id) superseded by a newer connection", metadata: ["device": "\(device)"])
                let superseded = ServerMessage.error(code: .superseded, message: "a newer connection of \(device) took over", seq: nil)
                await Self.within(settings.closeDeadline) {
                    try await outbound.write(.text(superseded.encoded()))
                    try await outbound.close(.init(codeNumber: Int(CloseCode.superseded.rawValue)), reason: "superseded")
                }
            case .restarting:
                logger.info("session \(id): the server is restarting", metadata: ["device": "\(device)"])
                await Self.within(settings.closeDeadline) {
                    try await outbound.close(.init(codeNumber: Int(CloseCode.serviceRestart.rawValue)), reason: "service restart")
                }
            }
            return
        }
    }

    /// Runs `body` while an unsolicited pong (RFC 6455 5.5.3, a one-way heartbeat) goes to the peer
    /// every ``heartbeatPeriod``: a session that waits on the server reads nothing, not even the
    /// car's pings, yet the car's liveness check and a proxy's read timeout (nginx's 12 s) must
    /// hear from it.
    private func heartbeat(_ outbound: WebSocketOutboundWriter, _ body: @escaping @Sendable () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await body() }
            group.addTask {
                while true {
                    try await Task.sleep(for: Self.heartbeatPeriod)
                    await Self.within(settings.closeDeadline) {
                        try await outbound.write(.custom(.init(fin: true, opcode: .pong, data: ByteBuffer(string: "busy"))))
                    }
                }
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// Under the agent's ping period (4 s) and far under a proxy's read timeout.
    static let heartbeatPeriod = Duration.seconds(3)

    /// Runs `body` for at most `limit`; past it, `body` is cancelled. Errors are dropped: this is
    /// for last words to a peer that may be gone.
    static func within(_ limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await body() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    /// The room one session holds in the server's ``InFlightBudget``: at most one segment's.
    final class Room: Sendable {
        let budget: InFlightBudget
        private let held = Mutex((bytes: 0, since: ContinuousClock.Instant?.none))
        init(budget: InFlightBudget) { self.budget = budget }
        func take(_ bytes: Int) async throws {
            giveBack()
            let taken = try await budget.reserve(bytes)
            held.withLock { $0 = (taken, .now) }
        }
        func giveBack() {
            let bytes = held.withLock { held in
                defer { held = (0, nil) }; return held.bytes
            }
            if bytes > 0 { budget.release(bytes) }
        }
        /// Since when the room is held, if it is.
        var since: ContinuousClock.Instant? { held.withLock { $0.since } }
    }

    /// How long a segment may take to arrive once it has room: a car that trickles its bytes (or
    /// announces a segment it never sends) cannot keep room from the others. Twice the idle
    /// timeout (60 s by default: 8 MiB at 1.1 Mbit/s, a 5-s copy at 33 kbit/s).
    var segmentDeadline: Duration { .seconds(2 * settings.idleTimeoutSeconds) }

    /// What the session holds once `hello` is through: its lease epoch, and whether it waits for
    /// usage (0 left). Shared by the receive loop and the usage watch.
    final class Lease: Sendable {
        private let state = Mutex<(epoch: Int64?, paused: Bool)>((nil, false))
        var epoch: Int64? { state.withLock { $0.epoch } }
        var paused: Bool {
            get { state.withLock { $0.paused } }
            set { state.withLock { $0.paused = newValue } }
        }
        func hold(_ epoch: Int64) { state.withLock { $0.epoch = epoch } }
    }

    private func receive(
        inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, lease: Lease, end: Ending, room: Room,
        analysis: AsyncStream<ReceivedSegment>.Continuation
    ) async throws {
        var limits = StreamSession.StateMachine.Limits(maxSegmentBytes: settings.maxSegmentBytes)
        limits.maxClipFileBytes = settings.maxClipFileBytes
        var machine = StreamSession.StateMachine(limits: limits)
        var log = RateLimit(interval: .seconds(10))
        var incidents: IncidentKeeper?
        for try await message in inbound.messages(maxSize: GuidanceProtocol.maxMessageBytes + 1024) {
            let actions =
                switch message {
                case .text(let text): machine.text(text)
                case .binary(let buffer): machine.binary(buffer.readableBytesView)
                }
            // Once the message is done with (room taken, segment charged and answered), the next
            // may be read: nothing is read ahead of the session.
            defer {
                if !machine.isReceivingSegment { room.giveBack() }
                intake.credit?.finished()
            }
            for action in actions {
                switch action {
                case .expect(let bytes):
                    // Nothing more is read until there is room: a storm waits in the network. The
                    // car (and a proxy between) hears the session is alive meanwhile.
                    try await heartbeat(outbound) { try await activity.whileServerBusy { try await room.take(bytes) } }
                case .open(let agent):
                    try await open(agent, lease: lease, end: end, outbound: outbound)
                    incidents = IncidentKeeper(keepDir: settings.keepDir, device: device, stream: agent.stream ?? "session:\(id)")
                case .reject(let code, let text, let seq, let reason):
                    try await reject(code, text, seq: seq, reason: reason, log: &log, outbound: outbound)
                case .close(let reason):
                    logger.notice("session \(id): closing: \(reason)", metadata: ["device": "\(device)"])
                    try await outbound.close(.protocolError, reason: reason)
                    return
                case .inspect(let received):
                    // The bytes, not the header: what the MP4 itself says decides, and what it costs.
                    guard let agent = machine.agent else { break }
                    let arrived = ContinuousClock.now
                    let video = try? await SegmentVideo.inspectReceived(received.data)
                    switch machine.judge(received, video: video, agent: agent) {
                    case .take(let segment):
                        metrics.verified()
                        guard
                            try await finish(
                                segment, arrived: arrived, agent: agent, lease: lease, outbound: outbound, analysis: analysis,
                                incidents: &incidents)
                        else { return }
                    case .refuse(let text, let seq, let reason):
                        try await reject(.badSegment, text, seq: seq, reason: reason, log: &log, outbound: outbound)
                    }
                case .ignore(let what):
                    logger.debug("session \(id): ignoring \(GuidanceText.loggable(what, limit: 200))", metadata: ["device": "\(device)"])
                case .keepIncident(let incident):
                    keep(incident, in: &incidents)
                case .announceClip(let clip):
                    let admission = await observer?.clipAdmission() ?? .unlimited
                    let held = try await clipWork("clip \(clip.id)", log: &log, outbound: outbound) { store, device in
                        try ClipQuota.announce(clip, device: device, admission: admission, store: store, now: .now)
                    }
                    // After the answer: the car's upload never waits for its owner's mail.
                    if held { await settings.impactMail?.noticed(clip, device: device) }
                case .clipPart(let part, let bytes):
                    try await clipWork("clip \(part.id) file \(part.name)", part: true, log: &log, outbound: outbound) { store, device in
                        try store.append(part, bytes, device: device)
                    }
                case .renewAuth(let token):
                    if reauthorize(token) {
                        logger.debug("session \(id): access token renewed", metadata: ["device": "\(device)"])
                    } else {
                        try await reject(
                            .unauthorized, "that token does not name this device", seq: nil, reason: .unreadable, log: &log,
                            outbound: outbound)
                    }
                }
            }
            activity.touch()
        }
    }

    /// A clip's description or part, carried out by the clip store on the blocking pool (whole,
    /// even if the session ends meanwhile: a part is appended or not, never cut), and answered:
    /// each `clip` and `clip_part` gets exactly one answer, `clip_have` or a `bad_clip` error, in
    /// the order they came, so the car can tell which is which. True if the store took it.
    @discardableResult
    private func clipWork(
        _ what: String, part: Bool = false, log: inout RateLimit, outbound: WebSocketOutboundWriter,
        _ work: @escaping @Sendable (any ClipStore, String) throws -> ClipAppend
    ) async throws -> Bool {
        guard let store = settings.clips else {
            try await reject(
                .badClip, "this server keeps no clips (clips.dir is unset)", seq: nil, reason: .clip, log: &log, outbound: outbound)
            return false
        }
        let result: ClipAppend
        do {
            result = try await uninterrupted { [device] in
                try await NIOThreadPool.singleton.runIfActive { try work(store, device) }
            }
        } catch {
            // The server's own paths and errors stay in its log; the car hears only that it failed.
            metrics.rejected(.clip)
            if let suppressed = log.admit(now: Self.now()) {
                logger.error(
                    "session \(id): \(what): clip store: \(error)\(suppressed > 0 ? " (\(suppressed) more in the last 10 s not logged)" : "")",
                    metadata: ["device": "\(device)"])
            }
            let text = ServerMessage.error(code: .badClip, message: "\(what): the clip store failed; nothing of it was kept", seq: nil)
                .encoded()
            try await outbound.write(.text(text))
            return false
        }
        switch result {
        case .held(let have):
            // Once per clip: when its last part made it whole (an announce of a stored clip says nothing new).
            if part, have.stored { logger.info("session \(id): \(what): the clip is stored whole", metadata: ["device": "\(device)"]) }
            try await outbound.write(.text(ServerMessage.clipHave(have).encoded()))
            return true
        case .refused(let text):
            try await reject(.badClip, text, seq: nil, reason: .clip, log: &log, outbound: outbound)
            return false
        case .mismatch(let have):
            // One answer per message: the car reads the file held from 0 again and sends it anew.
            metrics.rejected(.clip)
            if let suppressed = log.admit(now: Self.now()) {
                logger.warning(
                    "session \(id): \(what): the bytes do not match the file's SHA-256; dropped\(suppressed > 0 ? " (\(suppressed) more in the last 10 s not logged)" : "")",
                    metadata: ["device": "\(device)"])
            }
            try await outbound.write(.text(ServerMessage.clipHave(have).encoded()))
            return true
        }
    }

    /// An incident the car reported: its segments kept (``IncidentKeeper``), and a line in the log.
    private func keep(_ incident: ClientMessage.Incident, in keeper: inout IncidentKeeper?) {
        let what =
            "incident \(incident.id) at \(incident.at), peak \(incident.peakG) g, \(incident.from) to \(incident.to)\(incident.final ? "" : " (open)")"
        guard keeper != nil else { return }
        do {
            guard let kept = try keeper?.keep(incident) else {
                logger.notice("session \(id): \(what): server.keepDir is unset, no segment kept", metadata: ["device": "\(device)"])
                return
            }
            logger.notice(
                "session \(id): \(what): \(kept.linked.count) segment(s) kept in \(kept.folder), \(kept.waiting.count) to come",
                metadata: ["device": "\(device)"])
        } catch {
            logger.error("session \(id): \(what): cannot keep it: \(error.localizedDescription)", metadata: ["device": "\(device)"])
        }
    }

    private func reject(
        _ code: ServerMessage.ErrorCode, _ text: String, seq: Int?, reason: StreamSession.StateMachine.Rejection,
        log: inout RateLimit, outbound: WebSocketOutboundWriter
    ) async throws {
        metrics.rejected(reason)
        if let suppressed = log.admit(now: Self.now()) {
            logger.warning(
                "session \(id): \(code.rawValue): \(text)\(suppressed > 0 ? " (\(suppressed) more in the last 10 s not logged)" : "")",
                metadata: ["device": "\(device)"])
        }
        try await outbound.write(.text(ServerMessage.error(code: code, message: text, seq: seq).encoded()))
    }

    private func open(_ agent: StreamSession.StateMachine.Agent, lease: Lease, end: Ending, outbound: WebSocketOutboundWriter) async throws
    {
        await sessions.add(id) { end.end($0) }
        lease.hold(try await leases.acquire(device: device, session: id))
        // With no allowance set, usage is unlimited and the ledger need not be asked.
        let remaining =
            settings.usageSeconds == nil ? nil : try await ledger.balance(device: device).remaining(allowance: settings.usageSeconds)
        lease.paused = remaining == 0
        // Started: its lease and balance are read. The place among the starting sessions is free
        // before the car can read its welcome.
        intake.started()
        try await outbound.write(.text(ServerMessage.welcome(session: id, remainingSeconds: remaining).encoded()))
        await observer?.opened()
        if !agent.named.isEmpty, agent.named != device {
            logger.notice(
                "session \(id): the agent calls itself \(GuidanceText.loggable(agent.named)); its token says '\(device)', which counts",
                metadata: ["device": "\(device)"])
        }
        // What the agent said of itself is a peer's string: escaped, and cut.
        logger.info(
            "session \(id) opened",
            metadata: [
                "device": "\(device)", "locale": "\(GuidanceText.loggable(agent.locale))", "agent": "\(GuidanceText.loggable(agent.agent))",
                "stream": "\(agent.stream.map { GuidanceText.loggable($0, limit: 128) } ?? "-")", "epoch": "\(lease.epoch ?? 0)"
            ])
    }

    /// Charges and acknowledges a verified segment (`arrived`: when its last message was read), and
    /// hands it to the analysis; `false` once the session is closing.
    private func finish(
        _ segment: StreamSession.StateMachine.Verified, arrived: ContinuousClock.Instant, agent: StreamSession.StateMachine.Agent,
        lease: Lease,
        outbound: WebSocketOutboundWriter, analysis: AsyncStream<ReceivedSegment>.Continuation,
        incidents: inout IncidentKeeper?
    ) async throws -> Bool {
        let header = segment.header
        // With no allowance set, usage is unlimited and the ledger need not be asked.
        if settings.usageSeconds != nil {
            let left = try await ledger.balance(device: device).remaining(allowance: settings.usageSeconds)
            guard StateMachine.mayCharge(remaining: left) else {
                try await endForQuota(seq: header.seq, lease: lease, outbound: outbound)
                return false
            }
        }
        // Without a stream id a segment cannot be recognised when re-sent: it is keyed by this session.
        let charge = UsageCharge(
            device: device, stream: agent.stream ?? "session:\(id)", seq: header.seq, sha256: segment.sha256,
            seconds: segment.seconds, fence: lease.epoch.map { LeaseFence(device: device, epoch: $0) })
        let answer: StateMachine.LedgerAnswer
        do {
            let charging = ContinuousClock.now
            let charged = try await ledger.charge(charge)
            metrics.charged(after: ContinuousClock.now - charging)
            switch charged {
            case .charged(let after):
                metrics.ledger(.charged)
                answer = .charged(remaining: after.remaining(allowance: settings.usageSeconds))
            case .alreadyCharged(_, let sha256):
                metrics.ledger(.duplicate)
                answer = .chargedBefore(sameBytes: sha256 == segment.sha256)
            }
        } catch LedgerError.fenced {
            metrics.ledger(.fenced)
            answer = .fenced
        } catch {
            metrics.ledger(.failed)
            logger.error("session \(id): cannot charge segment \(header.seq): \(error)", metadata: ["device": "\(device)"])
            answer = .failed
        }
        let usageLeft: Int?, endsSession: Bool
        switch StateMachine.answer(answer) {
        case .acknowledge(let left, let ends):
            (usageLeft, endsSession) = (left, ends)
        case .acknowledgeAgain:
            metrics.resent()
            logger.info(
                "segment \(header.seq) re-sent, acknowledged again", metadata: ["device": "\(device)", "stream": "\(charge.stream)"])
            try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
            return true
        case .refuseOtherContent:
            metrics.rejected(.digest)
            try await outbound.write(
                .text(
                    ServerMessage.error(
                        code: .badSegment, message: "segment \(header.seq) of this stream was already delivered with other content",
                        seq: header.seq
                    ).encoded()))
            return true
        case .superseded:
            logger.info(
                "session \(id): its lease was taken; segment \(header.seq) left to the newer session", metadata: ["device": "\(device)"])
            try? await outbound.close(.init(codeNumber: Int(CloseCode.superseded.rawValue)), reason: "superseded")
            return false
        case .ledgerUnavailable:
            try? await outbound.write(
                .text(ServerMessage.error(code: .internal, message: "usage ledger unavailable", seq: header.seq).encoded()))
            try? await outbound.close(.unexpectedServerError, reason: "usage ledger unavailable")
            return false
        }
        // Logged before the car hears it: a server killed between the two has a log that names
        // every segment a car was told it holds (the ledger already does).
        logger.info("segment \(header.seq) verified", metadata: ["device": "\(device)", "bytes": "\(segment.data.count)"])
        try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
        metrics.acknowledged(after: ContinuousClock.now - arrived)
        if let gps = header.gps, !gps.isEmpty { await observer?.tracked(gps) }
        if let folder = settings.keepDir {
            let file = URL(fileURLWithPath: folder).appendingPathComponent(
                Self.keptName(device: device, stream: charge.stream, seq: header.seq))
            do {
                try segment.data.write(to: file, options: .atomic)
                for incident in incidents?.kept(seq: header.seq, file: file) ?? [] {
                    logger.info("segment \(header.seq) kept for an incident in \(incident)", metadata: ["device": "\(device)"])
                }
            } catch {
                logger.error("cannot keep segment \(header.seq) in \(folder): \(error.localizedDescription)")
            }
        }
        let received = ReceivedSegment(device: device, stream: charge.stream, locale: agent.locale, header: header, data: segment.data)
        if case .dropped(let older) = analysis.yield(received) {
            metrics.analysisSkipped()
            logger.info(
                "segment \(older.header.seq) not analysed: segment \(header.seq) arrived while it waited", metadata: ["device": "\(device)"]
            )
        }
        if let usageLeft { try await outbound.write(.text(ServerMessage.usage(remainingSeconds: usageLeft).encoded())) }
        if endsSession {
            try await endForQuota(seq: nil, lease: lease, outbound: outbound)
            return false
        }
        return true
    }

    /// No usage left: the lease is paused (no segment is taken on it), the car is told, and the
    /// session ends. A segment not acknowledged stays with the car until usage returns.
    private func endForQuota(seq: Int?, lease: Lease, outbound: WebSocketOutboundWriter) async throws {
        lease.paused = true
        try await outbound.write(.text(ServerMessage.error(code: .quotaExhausted, message: "no guidance time left", seq: seq).encoded()))
        try await outbound.close(.init(codeNumber: Int(CloseCode.quotaExhausted.rawValue)), reason: "quota exhausted")
    }

    /// Analyses the waiting segment, one at a time, and sends what the analyzer says.
    private func analyze(_ clips: AsyncStream<ReceivedSegment>, outbound: WebSocketOutboundWriter) async throws {
        for await clip in clips {
            let started = ContinuousClock.now
            let seq = clip.header.seq
            do {
                if var guidance = try await analyzer.analyze(clip) {
                    // Whatever the analyzer (a model's words, a script's), the driver hears clean text.
                    guidance.text = GuidanceText.clean(guidance.text)
                    try await outbound.write(.text(ServerMessage.guidance(guidance).encoded()))
                    if !guidance.clear, !guidance.text.isEmpty { await observer?.guided(guidance.text) }
                }
            } catch is CancellationError {
                return
            } catch ModelCallError.unavailable(let service) {
                try await outbound.write(
                    .text(
                        ServerMessage.error(
                            code: .guidanceUnavailable, message: "\(service) is not answering; guidance resumes when it does", seq: seq
                        ).encoded()))
            } catch {
                logger.error("analyzer failed on segment \(seq): \(error)", metadata: ["device": "\(device)"])
                try await outbound.write(.text(ServerMessage.error(code: .internal, message: "analysis failed", seq: seq).encoded()))
            }
            metrics.analyzed(after: ContinuousClock.now - started)
        }
    }

    /// Every ``usagePoll`` (on ``SessionChecks``' tick, one timer for all sessions), two questions
    /// to what an operator may have changed:
    /// - Is the device's token still in the tokens file (`guidance-server token remove`)? Once it
    ///   is gone, the session is told (`unauthorized`) and closed with 4401, and the returning
    ///   ends it.
    /// - While the device has no usage left: has it been credited (`guidance-server credit`, from
    ///   any instance)? Then the agent is told with a `usage` message and resumes.
    ///
    /// The tick only looks; this task wakes only when there is something to do. With thousands of
    /// sessions, a timer each was CPU the segments need.
    private func watchTokenAndUsage(lease: Lease, outbound: WebSocketOutboundWriter) async throws {
        let (ticks, tick) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let stillAuthorized = self.stillAuthorized
        await sessions.watch(id) {
            if lease.paused || !stillAuthorized() { tick.yield() }
        }
        defer { tick.finish() }
        if stillAuthorized() {
            for await _ in ticks {
                guard stillAuthorized() else { break }
                guard lease.paused, settings.usageSeconds != nil else { continue }
                guard let left = try? await ledger.balance(device: device).remaining(allowance: settings.usageSeconds), left > 0 else {
                    continue
                }
                lease.paused = false
                logger.info("session \(id): usage credited, \(left) s left", metadata: ["device": "\(device)"])
                try await outbound.write(.text(ServerMessage.usage(remainingSeconds: left).encoded()))
            }
            // The ticks end only when the session is ending (cancelled): nothing more to say then.
            try Task.checkCancellation()
        }
        logger.notice(
            "session \(id): the device is no longer authorized (token removed, access token run out, or unpaired); closing",
            metadata: ["device": "\(device)"])
        await Self.within(settings.closeDeadline) {
            try await outbound.write(
                .text(ServerMessage.error(code: .unauthorized, message: "this device is no longer authorized", seq: nil).encoded()))
            try await outbound.close(.init(codeNumber: Int(CloseCode.unauthorized.rawValue)), reason: "not authorized")
        }
    }

    static let usagePoll = Duration.seconds(2)

    /// The file a kept segment is written to: `DEVICE-STREAM-SEQ.mp4`, the same key the ledger
    /// charges under (so an agent's restart, a new stream, never overwrites an earlier one), with
    /// the whole seq, and any character of the names that a file name should not hold as `_`.
    static func keptName(device: String, stream: String, seq: Int) -> String {
        let number = String(seq)
        return "\(fileSafe(device))-\(fileSafe(stream))-\(String(repeating: "0", count: max(0, 6 - number.count)))\(number).mp4"
    }

    /// A peer's string as part of a file name: letters, digits, `.`, `_` and `-` kept, anything
    /// else `_`, at most 128 characters.
    static func fileSafe(_ name: String) -> String {
        String(
            String.UnicodeScalarView(
                name.unicodeScalars.prefix(128).map { scalar in
                    scalar.isASCII
                        && (scalar.properties.isAlphabetic || scalar.properties.numericType != nil || "._-".unicodeScalars.contains(scalar))
                        ? scalar : "_"
                }))
    }

    /// Carries out ``IdleRules``: pings a quiet agent half way through the idle timeout, and
    /// closes a session that stays silent, never says `hello`, or holds room for a segment that
    /// does not come. The ping and the close each have the close deadline: a peer that stopped
    /// reading (its socket full, so nothing is read from it either) cannot hold the watch, or the
    /// session.
    private func watchIdle(outbound: WebSocketOutboundWriter, room: Room, lease: Lease) async throws {
        let rules = IdleRules(
            idleTimeout: .seconds(settings.idleTimeoutSeconds), startBy: .now + .milliseconds(settings.handshakeTimeoutMs),
            segmentDeadline: segmentDeadline)
        var pinged: ContinuousClock.Instant?
        while true {
            let now = ContinuousClock.now
            switch rules.next(now: now, lastHeard: activity.last, started: lease.epoch != nil, roomSince: room.since, pinged: pinged) {
            case .close(let reason, let why):
                logger.notice("session \(id): \(why), closing", metadata: ["device": "\(device)"])
                await Self.within(settings.closeDeadline) {
                    try await outbound.close(.init(codeNumber: Int(CloseCode.idle.rawValue)), reason: reason)
                }
                return
            case .ping:
                pinged = now
                await Self.within(settings.closeDeadline) {
                    try await outbound.write(.custom(.init(fin: true, opcode: .ping, data: ByteBuffer(string: "idle"))))
                }
            case .sleep(let until):
                // Room taken while this sleeps is looked at when it wakes (within half the idle timeout).
                try await Task.sleep(until: until, clock: .continuous)
            }
        }
    }

    /// Monotonic nanoseconds (`CLOCK_MONOTONIC`), for ``RateLimit``.
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
