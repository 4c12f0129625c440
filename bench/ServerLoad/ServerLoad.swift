// server-load: the devices of bench/server_load.py as a compiled program, so that the load on the
// guidance server costs little CPU beside it. bench/server_load.py starts the server, runs this
// (`--generator compiled`, its default) and reports what both print.
//
// Each device does what the Python devices do, which is what the agent does:
// - opens /v1/stream with its bearer token; a 503 or 429 at the upgrade is waited out for its
//   Retry-After (at least 1 s), then tried again;
// - sends `hello` and waits for the first answer (the session opened);
// - sends a segment every 5 s at its own phase (its place in the ramp, or with `--phases` a place of
//   its own in that many seconds, as cars that started recording at different times): the header, then the MP4 in
//   64-KiB binary messages; slots missed while connecting are sent at once, at most 3 (the agent's
//   `uplink.queueSegments`), one after another;
// - times each ack from its segment's last chunk written to the ack read.
//
// With `--reconnect` (bench/server_load.py's `--crash-at` and `--kill-instance-at`), a device whose
// session ends before the run's end (a close frame of any code, the connection dying, a connect that
// fails) connects again, as the agent does: after `--reconnect-jitter-ms` (a uniform wait, "at
// once"), or else the agent's backoff (full jitter, 250 ms doubling to 30 s). On its new session it
// first re-sends, with the same `seq` and `stream`, every segment it sent that was not acknowledged,
// then keeps its schedule. Its `hello` names the same `stream` in every session, so the server's
// ledger charges a re-sent segment once. A refusal's Retry-After gets up to half of it again as
// jitter (the server answers storms with 503), as cars that would otherwise all come back at once.
//
// Every message a device sends is masked, as a client's must be. The segment's frames are masked
// once, with one key for the run, and then written as they are: the server unmasks every byte of
// them as it would any other key's.
//
// On one event loop by default (`--threads`). Prints "ready" on a line once the devices are about
// to start, and one JSON object when they are done.
import ArgumentParser
import Crypto
import Foundation
import GuidanceProtocol
import NIOCore
import NIOPosix
import NIOWebSocket

@main
struct ServerLoad: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server-load", abstract: "Devices streaming segments to a guidance server, for bench/server_load.py.")

    @Option(help: "The server's port on 127.0.0.1.") var port: Int
    @Option(help: "A file of devices, one a line: its bearer token, a space, its device id.") var tokens: String
    @Option(help: "The MP4 each device sends.") var segment: String
    @Option(help: "Seconds each device runs, from the start of the run.") var seconds: Double
    @Option(help: "Seconds over which the devices connect.") var ramp: Double = 5
    @Option(
        help:
            "Seconds over which the devices' first segments fall due, apart from when they connect (cars recording since before the server went down); by default each is due as it connects."
    )
    var phases: Double?
    @Option(help: "Event loop threads.") var threads: Int = 1
    @Flag(help: "Open the sessions and send no segment: what starting them costs the server.") var sessionsOnly = false
    @Flag(help: "A device whose session ends before the run's end connects again and re-sends what was not acknowledged.")
    var reconnect = false
    @Option(help: "With --reconnect: connect again after a uniform wait of 0 to this many ms (0: at once), instead of the agent's backoff.")
    var reconnectJitterMs: Double?
    @Option(
        help:
            "With --reconnect-jitter-ms: the wait in ms (before that jitter) after an attempt that failed before its session opened, such as a connection refused while the server starts again."
    )
    var reconnectRetryMs: Double = 100
    @Option(
        help:
            "Seconds after the run's end that a device keeps its session for the acks still due (nothing new is sent then); a segment not acknowledged by then is lost."
    )
    var drain: Double = 1

    func run() throws {
        let devices = try String(contentsOfFile: self.tokens, encoding: .utf8).split(separator: "\n").map { line in
            let fields = line.split(separator: " ", maxSplits: 1).map(String.init)
            return (token: fields[0], id: fields.count > 1 ? fields[1] : fields[0])
        }
        let mp4 = try Data(contentsOf: URL(fileURLWithPath: segment))
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        defer { try? group.syncShutdownGracefully() }
        let policy: ReconnectPolicy? =
            reconnect
            ? reconnectJitterMs.map { ReconnectPolicy.atOnce(jitter: $0 / 1000, retry: reconnectRetryMs / 1000) } ?? .backoff
            : nil
        let plan = Plan(port: port, mp4: [UInt8](mp4), sessionsOnly: sessionsOnly, reconnect: policy, drain: duration(drain))

        FileHandle.standardOutput.write(Data("ready\n".utf8))
        let start = NIODeadline.now()
        let steadyFrom = start + duration(ramp) + Plan.period
        let end = start + duration(seconds)
        let loops = (0..<threads).map { _ in group.next() }
        let tallies = try loops.enumerated().map { index, loop in
            try loop.submit { () -> NIOLoopBound<Tally> in
                let tally = Tally(start: start, steadyFrom: steadyFrom)
                for (n, named) in devices.enumerated() where n % loops.count == index {
                    let connectAt = start + duration(ramp * Double(n) / Double(devices.count))
                    // A place of its own, spread evenly whatever the number of devices (the golden ratio's steps).
                    let phase =
                        phases.map { start + duration($0 * (Double(n) * 0.618_033_988_75).truncatingRemainder(dividingBy: 1)) } ?? connectAt
                    let device = Device(
                        token: named.token, id: named.id, plan: plan, tally: tally, loop: loop, connectAt: connectAt, phase: phase,
                        end: end)
                    tally.devices.append(device)
                    device.begin()
                }
                return NIOLoopBound(tally, eventLoop: loop)
            }.wait()
        }
        // Every device ends at the run's end plus a second (for the last acks), as in the Python devices.
        while NIODeadline.now() < end + duration(drain) + .milliseconds(500) { usleep(100_000) }
        let reports = try zip(loops, tallies).map { loop, tally in try loop.submit { tally.value.report() }.wait() }
        let merged = reports.dropFirst().reduce(into: reports[0]) { $0.merge($1) }
        let json = try JSONEncoder().encode(merged)
        FileHandle.standardOutput.write(json)
        FileHandle.standardOutput.write(Data("\n".utf8))
    }
}

/// Seconds as NIO's time.
func duration(_ seconds: Double) -> TimeAmount { .nanoseconds(Int64(seconds * 1e9)) }

/// NIO's time as seconds.
func inSeconds(_ amount: TimeAmount) -> Double { Double(amount.nanoseconds) / 1e9 }

/// How a device whose session ended connects again (`--reconnect`).
enum ReconnectPolicy: Sendable {
    /// A uniform wait of 0…`jitter` s after a session ends; `retry` s more after an attempt that
    /// failed before its session opened, so that a fleet facing a closed port does not spin.
    case atOnce(jitter: Double, retry: Double)
    /// The agent's backoff (``Backoff``).
    case backoff
}

/// The agent's reconnect backoff (Sources/Agent/Uplink/Backoff.swift), so that the bench's fleet
/// comes back as cars do: full jitter, a ceiling of 250 ms doubling at each failure up to 30 s, from
/// 250 ms again after a session that lived 30 s (the agent's `resetAfter`).
struct Backoff {
    static let base = 0.25, cap = 30.0, resetAfter = 30.0
    var attempt = 0

    /// The wait before the next attempt, in seconds; `sessionLived` nil after an attempt that never opened.
    mutating func next(sessionLived: Double?) -> Double {
        if let lived = sessionLived, lived >= Self.resetAfter { attempt = 0 }
        let ceiling = min(Self.cap, Self.base * Double(1 << min(attempt, 20)))
        attempt += 1
        return Double.random(in: 0...ceiling)
    }
}

/// What every device sends, built once: the segment's chunks as masked binary frames.
struct Plan: Sendable {
    /// How often a device sends: what the agent records per segment.
    static let period = TimeAmount.seconds(5)
    static let queuedSegments = 3
    static let key = WebSocketMaskingKey.random()

    let port: Int
    let segmentFrames: ByteBuffer
    let bytes: Int
    let chunks: Int
    let sha256: String
    let sessionsOnly: Bool
    /// nil: a device whose session ends stops, as before `--reconnect`.
    let reconnect: ReconnectPolicy?
    /// How long after the run's end a device waits for its last acks.
    let drain: TimeAmount

    init(port: Int, mp4: [UInt8], sessionsOnly: Bool, reconnect: ReconnectPolicy?, drain: TimeAmount = .seconds(1)) {
        self.drain = drain
        self.port = port
        self.sessionsOnly = sessionsOnly
        self.reconnect = reconnect
        bytes = mp4.count
        let size = GuidanceProtocol.maxMessageBytes
        chunks = (mp4.count + size - 1) / size
        var frames = ByteBuffer()
        for offset in stride(from: 0, to: mp4.count, by: size) {
            Self.writeFrame(opcode: .binary, payload: mp4[offset..<min(offset + size, mp4.count)], into: &frames)
        }
        segmentFrames = frames
        sha256 = SHA256.hash(data: mp4).map { String(format: "%02x", $0) }.joined()
    }

    /// One whole, masked client frame (RFC 6455 §5.2).
    static func writeFrame(opcode: WebSocketOpcode, payload: some Collection<UInt8>, into buffer: inout ByteBuffer) {
        let maskBit: UInt8 = 0x80
        buffer.writeInteger(0x80 | UInt8(webSocketOpcode: opcode))
        switch payload.count {
        case ..<126: buffer.writeInteger(maskBit | UInt8(payload.count))
        case ..<65536:
            buffer.writeInteger(maskBit | 126)
            buffer.writeInteger(UInt16(payload.count))
        default:
            buffer.writeInteger(maskBit | 127)
            buffer.writeInteger(UInt64(payload.count))
        }
        buffer.writeBytes(key)
        var body = ByteBuffer(bytes: payload)
        body.webSocketMask(key)
        buffer.writeImmutableBuffer(body)
    }

    static func frame(_ opcode: WebSocketOpcode, _ payload: some Collection<UInt8>) -> ByteBuffer {
        var buffer = ByteBuffer()
        writeFrame(opcode: opcode, payload: payload, into: &buffer)
        return buffer
    }
}

/// What the devices of one event loop saw. Lives on that loop only.
final class Tally {
    struct Report: Codable {
        var sessions = 0, held = 0, sent = 0, acked = 0, guidance = 0
        var closes: [String: Int] = [:], errors: [String: Int] = [:], refusals: [String: Int] = [:]
        var admittedAfter: [Double] = [], latencyMs: [Double] = [], startLatencyMs: [Double] = [], steadyLatencyMs: [Double] = []
        /// When each ack's segment was written, in seconds from the run's start (the same order as `latencyMs`).
        var writtenAtS: [Double] = []
        /// Re-sends on a new session of segments sent and not acknowledged (`--reconnect`).
        var resent = 0
        /// Segments sent (their last chunk written at least once) and never acknowledged by the device's end;
        /// `unwritten`: begun (header written) but never written whole, the connection gone each time.
        var lost = 0, unwritten = 0
        /// A few of the lost ones, "device#seq", to look for in the server's log.
        var lostSegments: [String] = []
        /// What the first few devices with a lost segment last did ("12.345 closed 4001"), by device.
        var lostHistories: [String: [String]] = [:]
        /// Acks of a seq already acknowledged or never sent.
        var strayAcks = 0
        /// `error` messages from the server, by code.
        var serverErrors: [String: Int] = [:]
        /// Per session that ended before the run's end and was followed by another: from the end (as the
        /// device saw it) to the next session's first message, in ms, and when it ended, s from the start.
        var reconnectMs: [Double] = [], reconnectLostAtS: [Double] = []
        /// Devices whose session ended before the run's end and that had none open at their end.
        var notBack = 0
        /// The run's start, CLOCK_MONOTONIC in ns (NIO's clock), against which to place what the bench did meanwhile.
        var startUptimeNs: UInt64 = 0

        mutating func merge(_ other: Report) {
            sessions += other.sessions; held += other.held; sent += other.sent; acked += other.acked; guidance += other.guidance
            closes.merge(other.closes, uniquingKeysWith: +)
            errors.merge(other.errors, uniquingKeysWith: +)
            refusals.merge(other.refusals, uniquingKeysWith: +)
            admittedAfter += other.admittedAfter
            latencyMs += other.latencyMs
            writtenAtS += other.writtenAtS
            startLatencyMs += other.startLatencyMs
            steadyLatencyMs += other.steadyLatencyMs
            resent += other.resent; lost += other.lost; unwritten += other.unwritten; strayAcks += other.strayAcks
            lostSegments = Array((lostSegments + other.lostSegments).prefix(Tally.lostShown))
            for (device, history) in other.lostHistories where lostHistories.count < Tally.historiesShown {
                lostHistories[device] = history
            }
            serverErrors.merge(other.serverErrors, uniquingKeysWith: +)
            reconnectMs += other.reconnectMs
            reconnectLostAtS += other.reconnectLostAtS
            notBack += other.notBack
        }
    }

    static let lostShown = 20
    static let historiesShown = 3
    let start: NIODeadline
    let steadyFrom: NIODeadline
    var counts = Report()
    /// This loop's devices, whose segments still unacknowledged are counted when the report is made.
    var devices: [Device] = []
    /// The segment headers' `capturedAt`: RFC 3339 UTC with milliseconds.
    let clock: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()

    init(start: NIODeadline, steadyFrom: NIODeadline) {
        self.start = start
        self.steadyFrom = steadyFrom
        counts.startUptimeNs = start.uptimeNanoseconds
    }

    func acked(writtenAt written: NIODeadline, now: NIODeadline) {
        let ms = Double((now - written).nanoseconds) / 1e6
        counts.latencyMs.append(ms)
        counts.writtenAtS.append(inSeconds(written - start))
        if written >= steadyFrom { counts.steadyLatencyMs.append(ms) } else { counts.startLatencyMs.append(ms) }
        counts.acked += 1
    }

    func reconnected(lostAt: NIODeadline, now: NIODeadline) {
        counts.reconnectMs.append(Double((now - lostAt).nanoseconds) / 1e6)
        counts.reconnectLostAtS.append(inSeconds(lostAt - start))
    }

    /// The counts, with what the devices still wait for counted as lost: every device has ended by now.
    func report() -> Report {
        var report = counts
        for device in devices {
            for (seq, segment) in device.pending.sorted(by: { $0.key < $1.key }) {
                guard segment.writtenAt != nil else {
                    report.unwritten += 1
                    continue
                }
                report.lost += 1
                if report.lostSegments.count < Self.lostShown { report.lostSegments.append("\(device.id)#\(seq)") }
                if report.lostHistories.count < Self.historiesShown, report.lostHistories[device.id] == nil {
                    report.lostHistories[device.id] = device.historyLines
                }
            }
        }
        return report
    }
}

/// One simulated device, on one event loop.
final class Device {
    /// A segment begun and not acknowledged: its header's `capturedAt`, and when the last chunk of its
    /// latest send was written (nil until one was written whole).
    struct Pending {
        let captured: String
        var writtenAt: NIODeadline?
    }

    let token: String
    let id: String
    let plan: Plan
    let tally: Tally
    let loop: any EventLoop
    /// When it connects (its place in the ramp), when its first segment is due, and when it stops sending.
    let connectAt: NIODeadline
    let phase: NIODeadline
    let end: NIODeadline
    /// The `stream` of every `hello` it sends: the ledger keys a charge by device, stream and seq, so a
    /// segment re-sent on a later session is recognised and charged once (an agent picks one per start).
    let stream = UUID().uuidString
    var channel: (any Channel)?
    /// Each connection attempt's number: what a handler of an earlier attempt reports is ignored.
    var attempt = 0
    /// Whether a session ever opened, and whether the current one is open (its first message read).
    var opened = false
    var sessionOpen = false
    var sessionOpenedAt: NIODeadline?
    var finished = false
    var due: NIODeadline
    var seq = 0
    var pending: [Int: Pending] = [:]
    /// The next segment's send, scheduled for its slot: cancelled if the session ends first, and the
    /// slot kept for the next session.
    var slot: (task: Scheduled<Void>, at: NIODeadline)?
    var backoff = Backoff()
    /// When an open session ended, until the next one opens (`--reconnect`).
    var lostAt: NIODeadline?
    /// Its last events and when they happened: reported if it loses a segment (``historyLines``).
    var history: [(at: NIODeadline, event: String)] = []

    /// Kept as it happens; formatted only for a report, so the writes and acks pay no formatting.
    func note(_ event: String) {
        if history.count == Self.historyKept { history.removeFirst() }
        history.append((.now(), event))
    }
    static let historyKept = 40

    /// The history as lines, seconds from the run's start first: "12.345 closed 4001".
    var historyLines: [String] {
        history.map { String(format: "%.3f ", inSeconds($0.at - tally.start)) + $0.event }
    }

    init(
        token: String, id: String, plan: Plan, tally: Tally, loop: any EventLoop, connectAt: NIODeadline, phase: NIODeadline,
        end: NIODeadline
    ) {
        self.token = token
        self.id = id
        self.plan = plan
        self.tally = tally
        self.loop = loop
        self.connectAt = connectAt
        self.phase = phase
        self.end = end
        due = phase
    }

    func begin() {
        let loop = self.loop.assumeIsolated()
        loop.scheduleTask(deadline: connectAt) { self.connect() }
        loop.scheduleTask(deadline: end + plan.drain) { self.finish() }
    }

    func connect() {
        guard !finished else { return }
        attempt += 1
        let attempt = self.attempt
        note("connect #\(attempt)")
        let bound = NIOLoopBound(self, eventLoop: loop)
        ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let device = bound.value
                    guard device.attempt == attempt else { return channel.close(promise: nil) }
                    device.channel = channel
                    try channel.pipeline.syncOperations.addHandler(UpgradeHandler(device: device, attempt: attempt))
                }
            }
            .connect(host: "127.0.0.1", port: plan.port)
            .assumeIsolated()
            .whenFailure { error in self.failed(error, attempt: attempt) }
    }

    var upgradeRequest: ByteBuffer {
        ByteBuffer(
            string: "GET \(GuidanceProtocol.path) HTTP/1.1\r\nHost: 127.0.0.1:\(plan.port)\r\nUpgrade: websocket\r\n"
                + "Connection: Upgrade\r\nSec-WebSocket-Key: \(Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString())\r\n"
                + "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer \(token)\r\n\r\n")
    }

    /// A 503 or 429 at the upgrade: tried again after its Retry-After (at least 1 s). With
    /// `--reconnect`, plus a uniform jitter of up to half of it (a fleet refused together would come
    /// back together), and no sooner than the agent's backoff.
    func refused(status: Int, retryAfter: Double?, attempt: Int) {
        guard attempt == self.attempt, !finished else { return }
        tally.counts.refusals[String(status), default: 0] += 1
        note("refused \(status), Retry-After \(retryAfter.map { String($0) } ?? "none")")
        abandon()
        var wait = max(1, retryAfter ?? 1)
        if let policy = plan.reconnect {
            wait += Double.random(in: 0...wait / 2)
            if case .backoff = policy { wait = max(wait, backoff.next(sessionLived: nil)) }
        }
        loop.assumeIsolated().scheduleTask(in: duration(wait)) { self.connect() }
    }

    func upgraded(_ channel: any Channel) {
        note("upgraded")
        let hello = ClientMessage.hello(
            .init(
                device: id, locale: "en-US", agent: "load",
                video: .init(width: 640, height: 360, fps: 10, segmentMs: 5000), stream: stream))
        channel.writeAndFlush(Plan.frame(.text, Array(hello.encoded().utf8)), promise: nil)
    }

    func received(_ message: ServerMessage, now: NIODeadline, attempt: Int) {
        guard attempt == self.attempt else { return }
        if !sessionOpen {
            note("session open")
            sessionOpened(now: now, attempt: attempt)
            return
        }
        switch message {
        case .ack(let seq):
            note("ack \(seq)")
            if let segment = pending.removeValue(forKey: seq) {
                if let writtenAt = segment.writtenAt { tally.acked(writtenAt: writtenAt, now: now) }
            } else {
                tally.counts.strayAcks += 1
            }
        case .guidance: tally.counts.guidance += 1
        case .error(let code, _, _): tally.counts.serverErrors[code.rawValue, default: 0] += 1
        default: break
        }
    }

    /// The session's first message: what was not acknowledged goes again first, then the schedule.
    func sessionOpened(now: NIODeadline, attempt: Int) {
        sessionOpen = true
        sessionOpenedAt = now
        tally.counts.sessions += 1
        if !opened {
            opened = true
            tally.counts.admittedAfter.append(inSeconds(now - connectAt))
        }
        if let lostAt {
            tally.reconnected(lostAt: lostAt, now: now)
            self.lostAt = nil
        }
        if pending.isEmpty {
            resumeSchedule(now: now, attempt: attempt)
        } else {
            resend(pending.keys.sorted()[...], attempt: attempt) { self.resumeSchedule(now: .now(), attempt: attempt) }
        }
    }

    /// Slots missed while connecting are sent at once, one after another, as the agent sends what it
    /// kept: at most 3 of them; the ones after keep the device's phase.
    func resumeSchedule(now: NIODeadline, attempt: Int) {
        var missed = 0
        while due + Plan.period < now {
            due = due + Plan.period
            missed += 1
        }
        sendSegments(backlog: min(missed, Plan.queuedSegments - 1), attempt: attempt)
    }

    /// The next segment, now if `backlog` says so, else at its due time; each after the last is written.
    func sendSegments(backlog: Int, attempt: Int) {
        guard due < end, !finished, !plan.sessionsOnly, channel != nil, attempt == self.attempt else { return }
        if backlog > 0 {
            sendNew(attempt: attempt) { self.sendSegments(backlog: backlog - 1, attempt: attempt) }
        } else {
            let at = due
            due = due + Plan.period
            let task = loop.assumeIsolated().scheduleTask(deadline: at) {
                self.slot = nil
                self.sendNew(attempt: attempt) { self.sendSegments(backlog: 0, attempt: attempt) }
            }
            slot = (task, at)
        }
    }

    /// A new segment: the next seq, captured now.
    func sendNew(attempt: Int, then next: @escaping () -> Void) {
        guard !finished, attempt == self.attempt, channel != nil else { return }
        let seq = self.seq
        self.seq += 1
        pending[seq] = Pending(captured: tally.clock.string(from: Date()))
        write(seq, attempt: attempt, then: next)
    }

    /// The segments of an earlier session not acknowledged, in seq order, with their seq and header.
    func resend(_ seqs: ArraySlice<Int>, attempt: Int, then next: @escaping () -> Void) {
        guard let seq = seqs.first else { return next() }
        guard pending[seq] != nil else { return resend(seqs.dropFirst(), attempt: attempt, then: next) }
        write(seq, attempt: attempt) {
            self.tally.counts.resent += 1
            self.resend(seqs.dropFirst(), attempt: attempt, then: next)
        }
    }

    /// Segment `seq`'s header and chunks on the current session; `next` once its last chunk is written,
    /// from when its ack is timed.
    func write(_ seq: Int, attempt: Int, then next: @escaping () -> Void) {
        guard !finished, attempt == self.attempt, let channel, let captured = pending[seq]?.captured else { return }
        note("write \(seq)")
        let header = ClientMessage.segment(
            .init(
                seq: seq, capturedAt: captured, durationMs: 5000, frames: 50, bytes: plan.bytes,
                sha256: plan.sha256, chunks: plan.chunks))
        channel.write(Plan.frame(.text, Array(header.encoded().utf8)), promise: nil)
        channel.writeAndFlush(plan.segmentFrames).assumeIsolated().whenComplete { result in
            guard case .success = result else { return self.note("write \(seq) failed") }
            self.note("written \(seq)")
            if self.pending[seq] != nil {
                if self.pending[seq]?.writtenAt == nil { self.tally.counts.sent += 1 }
                self.pending[seq]?.writtenAt = .now()
            }
            next()
        }
    }

    func pong(_ data: ByteBuffer) {
        channel?.writeAndFlush(Plan.frame(.pong, Array(buffer: data)), promise: nil)
    }

    func closed(code: UInt16?, attempt: Int) {
        guard !finished, attempt == self.attempt else { return }
        tally.counts.closes[code.map(String.init) ?? "None", default: 0] += 1
        note("closed \(code.map(String.init) ?? "without a code")")
        ended()
    }

    func failed(_ error: any Error, attempt: Int) {
        guard !finished, attempt == self.attempt else { return }
        tally.counts.errors[String("\(type(of: error)): \(error)".prefix(80)), default: 0] += 1
        note("failed: \(String("\(error)".prefix(80)))")
        ended()
    }

    /// The session or the attempt at one is over: without `--reconnect` the device stops; with it, it
    /// connects again after its policy's wait, unless the run is over.
    func ended() {
        guard let policy = plan.reconnect else {
            finished = true
            channel?.close(promise: nil)
            return
        }
        let now = NIODeadline.now()
        let wasOpen = sessionOpen
        let lived = wasOpen ? sessionOpenedAt.map { inSeconds(now - $0) } : nil
        if wasOpen { lostAt = now }
        abandon()
        guard now < end else { return note("the run is over: not connecting again") }
        let wait: Double =
            switch policy {
            case .atOnce(let jitter, let retry): (wasOpen ? 0 : retry) + Double.random(in: 0...jitter)
            case .backoff: backoff.next(sessionLived: lived)
            }
        loop.assumeIsolated().scheduleTask(in: duration(wait)) { self.connect() }
    }

    /// Drops the current connection and whatever it would still report; a slot scheduled on it is
    /// given back to the schedule, so the next session sends it.
    func abandon() {
        attempt += 1
        sessionOpen = false
        channel?.close(promise: nil)
        channel = nil
        if let slot {
            slot.task.cancel()
            due = slot.at
            self.slot = nil
        }
    }

    func finish() {
        guard !finished else { return }
        finished = true
        note(sessionOpen ? "end, session open" : "end, no session")
        if sessionOpen {
            tally.counts.held += 1
        } else if opened {
            tally.counts.notBack += 1
        } else {
            tally.counts.errors["NotOpenedByTheEnd", default: 0] += 1
        }
        if let channel {
            var body = ByteBuffer()
            body.writeInteger(CloseCode.normal.rawValue)
            channel.writeAndFlush(Plan.frame(.connectionClose, Array(buffer: body)), promise: nil)
            channel.close(promise: nil)
        }
    }
}

/// Reads the upgrade's answer; on 101 hands the stream to the frame decoder and `SessionHandler`.
final class UpgradeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let device: Device
    /// The device's connection attempt this channel is.
    let attempt: Int
    var head = ByteBuffer()

    init(device: Device, attempt: Int) {
        self.device = device
        self.attempt = attempt
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(device.upgradeRequest), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        head.writeBuffer(&bytes)
        let view = head.readableBytesView
        guard let end = view.firstRange(of: [13, 10, 13, 10]) else {
            if head.readableBytes > 16_384 { device.failed(UpgradeError.headTooLong, attempt: attempt) }
            return
        }
        let text = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
        let lines = text.split(separator: "\r\n")
        let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
        head.moveReaderIndex(forwardBy: end.upperBound - view.startIndex)
        switch status {
        case 101:
            let rest = head
            let session = SessionHandler(device: device, attempt: attempt)
            do {
                try context.pipeline.syncOperations.addHandlers(
                    [
                        ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)),
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: 64, maxAccumulatedFrameSize: 1 << 20),
                        session
                    ],
                    position: .after(self))
            } catch {
                device.failed(error, attempt: attempt)
                return
            }
            device.upgraded(context.channel)
            if rest.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(rest)) }
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        case 429, 503:
            let retry = lines.dropFirst().first { $0.lowercased().hasPrefix("retry-after:") }
                .flatMap { Double($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) }
            device.refused(status: status, retryAfter: retry, attempt: attempt)
        default:
            device.failed(UpgradeError.status(status), attempt: attempt)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { device.failed(error, attempt: attempt) }

    func channelInactive(context: ChannelHandlerContext) {
        // Closed before the upgrade was answered (a refusal closes it too: `refused` already moved on).
        device.failed(UpgradeError.closedBeforeAnswer, attempt: attempt)
    }
}

enum UpgradeError: Error { case headTooLong, status(Int), closedBeforeAnswer }

/// The open session: the server's messages to the device.
final class SessionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    let device: Device
    let attempt: Int

    init(device: Device, attempt: Int) {
        self.device = device
        self.attempt = attempt
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            let text = String(buffer: frame.unmaskedData)
            if let message = try? ServerMessage.decode(text) { device.received(message, now: .now(), attempt: attempt) }
        case .ping:
            device.pong(frame.unmaskedData)
        case .connectionClose:
            var body = frame.unmaskedData
            device.closed(code: body.readInteger(as: UInt16.self), attempt: attempt)
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { device.failed(error, attempt: attempt) }

    func channelInactive(context: ChannelHandlerContext) { device.closed(code: nil, attempt: attempt) }
}
