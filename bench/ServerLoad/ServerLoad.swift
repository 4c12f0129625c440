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
    @Option(help: "Seconds over which the devices' first segments fall due, apart from when they connect (cars recording since before the server went down); by default each is due as it connects.")
    var phases: Double?
    @Option(help: "Event loop threads.") var threads: Int = 1
    @Flag(help: "Open the sessions and send no segment: what starting them costs the server.") var sessionsOnly = false

    func run() throws {
        let devices = try String(contentsOfFile: self.tokens, encoding: .utf8).split(separator: "\n").map { line in
            let fields = line.split(separator: " ", maxSplits: 1).map(String.init)
            return (token: fields[0], id: fields.count > 1 ? fields[1] : fields[0])
        }
        let mp4 = try Data(contentsOf: URL(fileURLWithPath: segment))
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        defer { try? group.syncShutdownGracefully() }
        let plan = Plan(port: port, mp4: [UInt8](mp4), sessionsOnly: sessionsOnly)

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
                    let phase = phases.map { start + duration($0 * (Double(n) * 0.618_033_988_75).truncatingRemainder(dividingBy: 1)) } ?? connectAt
                    let device = Device(token: named.token, id: named.id, plan: plan, tally: tally, loop: loop, connectAt: connectAt, phase: phase,
                                        end: end)
                    device.begin()
                }
                return NIOLoopBound(tally, eventLoop: loop)
            }.wait()
        }
        // Every device ends at the run's end plus a second (for the last acks), as in the Python devices.
        while NIODeadline.now() < end + .milliseconds(1500) { usleep(100_000) }
        let reports = try zip(loops, tallies).map { loop, tally in try loop.submit { tally.value.report() }.wait() }
        let merged = reports.dropFirst().reduce(into: reports[0]) { $0.merge($1) }
        let json = try JSONEncoder().encode(merged)
        FileHandle.standardOutput.write(json)
        FileHandle.standardOutput.write(Data("\n".utf8))
    }
}

/// Seconds as NIO's time.
func duration(_ seconds: Double) -> TimeAmount { .nanoseconds(Int64(seconds * 1e9)) }

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

    init(port: Int, mp4: [UInt8], sessionsOnly: Bool) {
        self.port = port
        self.sessionsOnly = sessionsOnly
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
        }
    }

    let start: NIODeadline
    let steadyFrom: NIODeadline
    var counts = Report()
    /// The segment headers' `capturedAt`: RFC 3339 UTC with milliseconds.
    let clock: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()

    init(start: NIODeadline, steadyFrom: NIODeadline) {
        self.start = start
        self.steadyFrom = steadyFrom
    }

    func acked(writtenAt written: NIODeadline, now: NIODeadline) {
        let ms = Double((now - written).nanoseconds) / 1e6
        counts.latencyMs.append(ms)
        counts.writtenAtS.append(Double((written - start).nanoseconds) / 1e9)
        if written >= steadyFrom { counts.steadyLatencyMs.append(ms) } else { counts.startLatencyMs.append(ms) }
        counts.acked += 1
    }

    func report() -> Report { counts }
}

/// One simulated device, on one event loop.
final class Device {
    let token: String
    let id: String
    let plan: Plan
    let tally: Tally
    let loop: any EventLoop
    /// When it connects (its place in the ramp), when its first segment is due, and when it stops sending.
    let connectAt: NIODeadline
    let phase: NIODeadline
    let end: NIODeadline
    var channel: (any Channel)?
    var opened = false
    var finished = false
    var due: NIODeadline
    var seq = 0
    var written: [Int: NIODeadline] = [:]

    init(token: String, id: String, plan: Plan, tally: Tally, loop: any EventLoop, connectAt: NIODeadline, phase: NIODeadline, end: NIODeadline) {
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
        loop.scheduleTask(deadline: end + .seconds(1)) { self.finish() }
    }

    func connect() {
        guard !finished else { return }
        let bound = NIOLoopBound(self, eventLoop: loop)
        ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    bound.value.channel = channel
                    try channel.pipeline.syncOperations.addHandler(UpgradeHandler(device: bound.value))
                }
            }
            .connect(host: "127.0.0.1", port: plan.port)
            .assumeIsolated()
            .whenFailure { error in self.failed(error) }
    }

    var upgradeRequest: ByteBuffer {
        ByteBuffer(string: "GET \(GuidanceProtocol.path) HTTP/1.1\r\nHost: 127.0.0.1:\(plan.port)\r\nUpgrade: websocket\r\n"
            + "Connection: Upgrade\r\nSec-WebSocket-Key: \(Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString())\r\n"
            + "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer \(token)\r\n\r\n")
    }

    func refused(status: Int, retryAfter: Double?) {
        tally.counts.refusals[String(status), default: 0] += 1
        channel?.close(promise: nil)
        channel = nil
        loop.assumeIsolated().scheduleTask(in: duration(max(1, retryAfter ?? 1))) { self.connect() }
    }

    func upgraded(_ channel: any Channel) {
        let hello = ClientMessage.hello(.init(device: id, locale: "en-US", agent: "load",
                                              video: .init(width: 640, height: 360, fps: 10, segmentMs: 5000), stream: UUID().uuidString))
        channel.writeAndFlush(Plan.frame(.text, Array(hello.encoded().utf8)), promise: nil)
    }

    func received(_ message: ServerMessage, now: NIODeadline) {
        if !opened {
            opened = true
            tally.counts.sessions += 1
            tally.counts.admittedAfter.append(Double((now - connectAt).nanoseconds) / 1e9)
            // Slots missed while connecting are sent at once, one after another, as the agent sends
            // what it kept: at most 3 of them; the ones after keep the device's phase.
            var missed = 0
            while due + Plan.period < now {
                due = due + Plan.period
                missed += 1
            }
            sendSegments(backlog: min(missed, Plan.queuedSegments - 1))
            return
        }
        switch message {
        case .ack(let seq):
            if let writtenAt = written.removeValue(forKey: seq) { tally.acked(writtenAt: writtenAt, now: now) }
        case .guidance: tally.counts.guidance += 1
        default: break
        }
    }

    /// The next segment, now if `backlog` says so, else at its due time; each after the last is written.
    func sendSegments(backlog: Int) {
        guard due < end, !finished, !plan.sessionsOnly, channel != nil else { return }
        let send = {
            guard !self.finished, let channel = self.channel else { return }
            let captured = self.tally.clock.string(from: Date())
            let header = ClientMessage.segment(.init(seq: self.seq, capturedAt: captured, durationMs: 5000, frames: 50, bytes: self.plan.bytes,
                                                     sha256: self.plan.sha256, chunks: self.plan.chunks, data: nil))
            channel.write(Plan.frame(.text, Array(header.encoded().utf8)), promise: nil)
            let seq = self.seq
            self.seq += 1
            channel.writeAndFlush(self.plan.segmentFrames).assumeIsolated().whenComplete { result in
                guard case .success = result else { return }
                self.written[seq] = .now()
                self.tally.counts.sent += 1
                self.sendSegments(backlog: max(0, backlog - 1))
            }
        }
        if backlog > 0 {
            send()
        } else {
            let at = due
            due = due + Plan.period
            loop.assumeIsolated().scheduleTask(deadline: at) { send() }
        }
    }

    func pong(_ data: ByteBuffer) {
        channel?.writeAndFlush(Plan.frame(.pong, Array(buffer: data)), promise: nil)
    }

    func closed(code: UInt16?) {
        guard !finished else { return }
        finished = true
        tally.counts.closes[code.map(String.init) ?? "None", default: 0] += 1
        channel?.close(promise: nil)
    }

    func failed(_ error: any Error) {
        guard !finished else { return }
        finished = true
        tally.counts.errors[String("\(type(of: error)): \(error)".prefix(80)), default: 0] += 1
        channel?.close(promise: nil)
    }

    func finish() {
        guard !finished else { return }
        finished = true
        if opened { tally.counts.held += 1 }
        else { tally.counts.errors["NotOpenedByTheEnd", default: 0] += 1 }
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
    var head = ByteBuffer()

    init(device: Device) { self.device = device }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(device.upgradeRequest), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        head.writeBuffer(&bytes)
        let view = head.readableBytesView
        guard let end = view.firstRange(of: [13, 10, 13, 10]) else {
            if head.readableBytes > 16_384 { device.failed(UpgradeError.headTooLong) }
            return
        }
        let text = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
        let lines = text.split(separator: "\r\n")
        let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
        head.moveReaderIndex(forwardBy: end.upperBound - view.startIndex)
        switch status {
        case 101:
            let rest = head
            let session = SessionHandler(device: device)
            do {
                try context.pipeline.syncOperations.addHandlers(
                    [ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)),
                     NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: 64, maxAccumulatedFrameSize: 1 << 20),
                     session],
                    position: .after(self))
            } catch {
                device.failed(error)
                return
            }
            device.upgraded(context.channel)
            if rest.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(rest)) }
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        case 429, 503:
            let retry = lines.dropFirst().first { $0.lowercased().hasPrefix("retry-after:") }
                .flatMap { Double($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) }
            device.refused(status: status, retryAfter: retry)
        default:
            device.failed(UpgradeError.status(status))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { device.failed(error) }

    func channelInactive(context: ChannelHandlerContext) {
        // Closed before the upgrade was answered (a refusal closes it too: `refused` already moved on).
        if device.channel === context.channel { device.failed(UpgradeError.closedBeforeAnswer) }
    }
}

enum UpgradeError: Error { case headTooLong, status(Int), closedBeforeAnswer }

/// The open session: the server's messages to the device.
final class SessionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    let device: Device

    init(device: Device) { self.device = device }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            let text = String(buffer: frame.unmaskedData)
            if let message = try? ServerMessage.decode(text) { device.received(message, now: .now()) }
        case .ping:
            device.pong(frame.unmaskedData)
        case .connectionClose:
            var body = frame.unmaskedData
            device.closed(code: body.readInteger(as: UInt16.self))
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { device.failed(error) }

    func channelInactive(context: ChannelHandlerContext) { device.closed(code: nil) }
}
