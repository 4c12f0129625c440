import Foundation
import GuidanceProtocol
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket

/// One agent's WebSocket session. Its protocol rules are ``IngestStateMachine``'s; this carries
/// out what the machine decides: the lease (one session per device), the ledger (each segment
/// charged once), `ack`, analysis, usage, and the idle check.
///
/// Anything malformed is answered with an `error` message (or, before `hello`, a close with a
/// reason) and never ends the server or touches other sessions.
struct StreamSession {
    let id = UUID().uuidString
    let device: String
    let settings: GuidanceServer.Settings
    let registry: SessionRegistry
    let analyzer: any SegmentAnalyzer
    let metrics: ServerMetrics
    let activity: ConnectionActivity
    let logger: Logger

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        metrics.sessionOpened()
        defer { metrics.sessionClosed() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await watchIdle(outbound: outbound) }
            defer { group.cancelAll() }
            try await receive(inbound: inbound, outbound: outbound)
        }
        await registry.unregister(device: device, id: id)
        logger.info("session \(id) ended", metadata: ["device": "\(device)"])
    }

    private func receive(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        var machine = IngestStateMachine(limits: .init(maxSegmentBytes: settings.maxSegmentBytes))
        var log = RateLimit(interval: .seconds(10))
        for try await message in inbound.messages(maxSize: GuidanceProtocol.maxMessageBytes + 1024) {
            let actions = switch message {
            case .text(let text): machine.text(text)
            case .binary(let buffer): machine.binary(buffer.readableBytesView)
            }
            for action in actions {
                switch action {
                case .open(let agent):
                    try await open(agent, outbound: outbound)
                case .reject(let code, let text, let seq, let reason):
                    metrics.rejected(reason)
                    if log.allows(now: Self.now()) {
                        let suppressed = log.takeSuppressed()
                        logger.warning("session \(id): \(code.rawValue): \(text)\(suppressed > 0 ? " (\(suppressed) more in the last 10 s not logged)" : "")",
                                       metadata: ["device": "\(device)"])
                    }
                    try await outbound.write(.text(ServerMessage.error(code: code, message: text, seq: seq).encoded()))
                case .close(let reason):
                    logger.notice("session \(id): closing: \(reason)", metadata: ["device": "\(device)"])
                    try await outbound.close(.protocolError, reason: reason)
                    return
                case .verified(let segment):
                    metrics.verified()
                    try await finish(segment, agent: machine.agent, outbound: outbound)
                case .ignore(let what):
                    logger.debug("session \(id): ignoring \(what)", metadata: ["device": "\(device)"])
                }
            }
            // A long analysis keeps the session busy, not idle.
            activity.touch()
        }
    }

    private func open(_ agent: IngestStateMachine.Agent, outbound: WebSocketOutboundWriter) async throws {
        await registry.register(device: device, id: id) {
            let superseded = ServerMessage.error(code: .superseded, message: "a newer connection of \(device) took over", seq: nil)
            logger.info("session \(id) superseded by a newer connection", metadata: ["device": "\(device)"])
            try? await outbound.write(.text(superseded.encoded()))
            try? await outbound.close(.init(codeNumber: Int(CloseCode.superseded.rawValue)), reason: "superseded")
        }
        let remaining = await registry.remainingSeconds(device: device)
        try await outbound.write(.text(ServerMessage.welcome(session: id, remainingSeconds: remaining).encoded()))
        logger.info("session \(id) opened", metadata: [
            "device": "\(device)", "locale": "\(agent.locale)", "agent": "\(agent.agent)", "stream": "\(agent.stream ?? "-")",
        ])
    }

    private func finish(_ segment: IngestStateMachine.Verified, agent: IngestStateMachine.Agent?,
                        outbound: WebSocketOutboundWriter) async throws {
        let header = segment.header
        if let stream = agent?.stream,
           await registry.wasAcknowledged(device: device, stream: stream, seq: header.seq, sha256: segment.sha256) {
            // Its ack was lost with an earlier connection: acknowledge it again, and only that.
            metrics.resent()
            try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
            logger.info("segment \(header.seq) re-sent, acknowledged again", metadata: ["device": "\(device)", "stream": "\(stream)"])
            return
        }
        if await registry.remainingSeconds(device: device) == 0 {
            // Not acknowledged: the agent keeps the segment until usage returns.
            try await outbound.write(.text(ServerMessage.error(code: .quotaExhausted, message: "no guidance time left", seq: header.seq).encoded()))
            try await outbound.close(.init(codeNumber: Int(CloseCode.quotaExhausted.rawValue)), reason: "quota exhausted")
            return
        }
        try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
        // Recorded once the ack is written, so that a re-send on the device's next session (which may
        // open while this one is still analysing or closing) is not analysed or charged again.
        if let stream = agent?.stream {
            await registry.recordAcknowledged(device: device, stream: stream, seq: header.seq, sha256: segment.sha256)
        }
        logger.info("segment \(header.seq) verified", metadata: ["device": "\(device)", "bytes": "\(segment.data.count)"])
        if let folder = settings.keepDir {
            let file = URL(fileURLWithPath: folder).appendingPathComponent("\(device)-\(String(format: "%06d", header.seq)).mp4")
            do { try segment.data.write(to: file, options: .atomic) } catch {
                logger.error("cannot keep segment \(header.seq) in \(folder): \(error.localizedDescription)")
            }
        }
        let received = ReceivedSegment(device: device, locale: agent?.locale ?? "", header: header, data: segment.data)
        let started = ContinuousClock.now
        do {
            if let guidance = try await analyzer.analyze(received) {
                try await outbound.write(.text(ServerMessage.guidance(guidance).encoded()))
            }
        } catch {
            logger.error("analyzer failed on segment \(header.seq): \(error)")
            try await outbound.write(.text(ServerMessage.error(code: .internal, message: "analysis failed", seq: header.seq).encoded()))
        }
        metrics.analyzed(after: ContinuousClock.now - started)
        if let left = await registry.spend(device: device, seconds: segment.seconds) {
            try await outbound.write(.text(ServerMessage.usage(remainingSeconds: left).encoded()))
            if left == 0 {
                try await outbound.write(.text(ServerMessage.error(code: .quotaExhausted, message: "no guidance time left", seq: nil).encoded()))
                try await outbound.close(.init(codeNumber: Int(CloseCode.quotaExhausted.rawValue)), reason: "quota exhausted")
            }
        }
    }

    /// Nothing at all from the agent (no message, no pong) for the idle timeout: close with 4001.
    /// Half way through a silence the server pings, so an agent that is alive but has nothing to
    /// send (paused by 4402, say) answers and stays.
    private func watchIdle(outbound: WebSocketOutboundWriter) async throws {
        let timeout = Duration.seconds(settings.idleTimeoutSeconds)
        var pinged: ContinuousClock.Instant?
        while true {
            let last = activity.last
            let now = ContinuousClock.now
            if now >= last + timeout {
                logger.notice("session \(id): nothing heard for \(settings.idleTimeoutSeconds) s, closing", metadata: ["device": "\(device)"])
                try await outbound.close(.init(codeNumber: Int(CloseCode.idle.rawValue)), reason: "idle")
                return
            }
            if now >= last + timeout / 2, pinged.map({ $0 < last }) ?? true {
                pinged = now
                try await outbound.write(.custom(.init(fin: true, opcode: .ping, data: ByteBuffer(string: "idle"))))
            }
            let next = now < last + timeout / 2 ? last + timeout / 2 : last + timeout
            try await Task.sleep(until: next, clock: .continuous)
        }
    }

    /// `CLOCK_MONOTONIC` nanoseconds, for ``RateLimit``.
    static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }
}
