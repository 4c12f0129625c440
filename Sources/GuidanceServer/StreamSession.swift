import Crypto
import Foundation
import GuidanceProtocol
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import Synchronization

/// One agent's WebSocket session: `hello`, then segment headers each followed by their chunks.
///
/// Anything malformed is answered with an `error` message (or, before `hello`, a close with a
/// reason) and never ends the server or touches other sessions.
struct StreamSession {
    let id = UUID().uuidString
    let device: String
    let settings: GuidanceServer.Settings
    let registry: SessionRegistry
    let analyzer: any SegmentAnalyzer
    let logger: Logger

    /// What the agent said in its `hello` that segments need.
    private struct Agent {
        let locale: String
        /// The agent's per-start stream id; `nil`: re-sent segments are not recognised.
        let stream: String?
    }

    private enum State {
        case awaitingHello
        case ready(Agent)
        case receiving(Agent, header: ClientMessage.SegmentHeader, data: Data, chunks: Int)
    }

    /// Longest stream id remembered; a longer one is ignored (as if the hello had none).
    static let maxStreamLength = 128
    /// Longest `durationMs` accepted: segments last a minute at most, so this leaves a wide margin.
    static let maxDurationMs = 10 * 60 * 1000

    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let lastActivity = Activity()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await watchIdle(lastActivity: lastActivity, outbound: outbound)
            }
            defer { group.cancelAll() }
            try await receive(inbound: inbound, outbound: outbound, lastActivity: lastActivity)
        }
        await registry.unregister(device: device, id: id)
        logger.info("session \(id) ended", metadata: ["device": "\(device)"])
    }

    private func receive(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter,
                         lastActivity: Activity) async throws {
        var state = State.awaitingHello
        do {
            for try await message in inbound.messages(maxSize: GuidanceProtocol.maxMessageBytes + 1024) {
                lastActivity.touch()
                state = try await handle(message, in: state, outbound: outbound)
            }
        } catch let error as ClosingError {
            logger.notice("session \(id): closing: \(error.reason)", metadata: ["device": "\(device)"])
            try await outbound.close(.protocolError, reason: error.reason)
        }
    }

    private struct ClosingError: Error { let reason: String }

    private func handle(_ message: WebSocketMessage, in state: State, outbound: WebSocketOutboundWriter) async throws -> State {
        switch (state, message) {
        case (.awaitingHello, .text(let text)):
            guard case .hello(let hello) = try? ClientMessage.decode(text) else {
                throw ClosingError(reason: "first message must be hello")
            }
            guard hello.protocol == GuidanceProtocol.version else {
                throw ClosingError(reason: "protocol \(hello.protocol) is not supported; this server speaks \(GuidanceProtocol.version)")
            }
            await registry.register(device: device, id: id) {
                let superseded = ServerMessage.error(code: .superseded, message: "a newer connection of \(device) took over", seq: nil)
                logger.info("session \(id) superseded by a newer connection", metadata: ["device": "\(device)"])
                try? await outbound.write(.text(superseded.encoded()))
                try? await outbound.close(.init(codeNumber: Int(CloseCode.superseded.rawValue)), reason: "superseded")
            }
            let remaining = await registry.remainingSeconds(device: device)
            try await outbound.write(.text(ServerMessage.welcome(session: id, remainingSeconds: remaining).encoded()))
            var stream = hello.stream
            if let given = stream, given.isEmpty || given.utf8.count > Self.maxStreamLength {
                logger.notice("session \(id): ignoring a stream id that is empty or over \(Self.maxStreamLength) bytes; re-sent segments will be analysed again",
                              metadata: ["device": "\(device)"])
                stream = nil
            }
            logger.info("session \(id) opened", metadata: [
                "device": "\(device)", "locale": "\(hello.locale)", "agent": "\(hello.agent)", "stream": "\(stream ?? "-")",
            ])
            return .ready(Agent(locale: hello.locale, stream: stream))

        case (.awaitingHello, .binary):
            throw ClosingError(reason: "first message must be hello")

        case (.ready(let agent), .text(let text)):
            let decoded: ClientMessage
            do {
                decoded = try ClientMessage.decode(text)
            } catch {
                try await sendError(.badSegment, "unreadable message: \(error)", seq: nil, outbound)
                return state
            }
            switch decoded {
            case .segment(let header):
                if let base64 = header.data {
                    guard let data = Data(base64Encoded: base64) else {
                        try await sendError(.badSegment, "data is not base64", seq: header.seq, outbound)
                        return state
                    }
                    try await finish(header, data: data, agent: agent, outbound)
                    return state
                }
                guard let chunks = header.chunks, chunks > 0, header.bytes > 0 else {
                    try await sendError(.badSegment, "a segment needs chunks ≥ 1 or data", seq: header.seq, outbound)
                    return state
                }
                var data = Data()
                data.reserveCapacity(min(header.bytes, 64 << 20))
                return .receiving(agent, header: header, data: data, chunks: 0)
            case .hello:
                try await sendError(.internal, "hello was already received", seq: nil, outbound)
                return state
            case .unknown(let type):
                logger.debug("ignoring message of unknown type \(type)")
                return state
            }

        case (.ready, .binary):
            try await sendError(.badSegment, "binary data without a segment header", seq: nil, outbound)
            return state

        case (.receiving(let agent, let header, var data, let chunks), .binary(let buffer)):
            data.append(contentsOf: buffer.readableBytesView)
            let received = chunks + 1
            guard received == header.chunks else {
                guard data.count <= header.bytes else {
                    try await sendError(.badSegment, "more bytes than the header's \(header.bytes)", seq: header.seq, outbound)
                    return .ready(agent)
                }
                return .receiving(agent, header: header, data: data, chunks: received)
            }
            try await finish(header, data: data, agent: agent, outbound)
            return .ready(agent)

        case (.receiving(let agent, let header, _, let chunks), .text):
            try await sendError(.badSegment, "got \(chunks) of \(header.chunks ?? 0) chunks before the next message", seq: header.seq, outbound)
            // The text starts something new: handle it as such.
            return try await handle(message, in: .ready(agent), outbound: outbound)
        }
    }

    private func finish(_ header: ClientMessage.SegmentHeader, data: Data, agent: Agent,
                        _ outbound: WebSocketOutboundWriter) async throws {
        guard data.count == header.bytes else {
            try await sendError(.badSegment, "received \(data.count) bytes, header says \(header.bytes)", seq: header.seq, outbound)
            return
        }
        let digest = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        guard digest == header.sha256.lowercased() else {
            try await sendError(.badSegment, "SHA-256 does not match", seq: header.seq, outbound)
            return
        }
        // Checked before anything is acknowledged, analysed or charged for it.
        guard (0...Self.maxDurationMs).contains(header.durationMs) else {
            try await sendError(.badSegment, "durationMs \(header.durationMs) is not within 0…\(Self.maxDurationMs)", seq: header.seq, outbound)
            return
        }
        if let stream = agent.stream,
           await registry.wasAcknowledged(device: device, stream: stream, seq: header.seq, sha256: digest) {
            // Its ack was lost with an earlier connection: acknowledge it again, and only that.
            try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
            logger.info("segment \(header.seq) re-sent, acknowledged again", metadata: ["device": "\(device)", "stream": "\(stream)"])
            return
        }
        try await outbound.write(.text(ServerMessage.ack(seq: header.seq).encoded()))
        // Recorded once the ack is written, so that a re-send on the device's next session (which may
        // open while this one is still analysing or closing) is not analysed or charged again.
        if let stream = agent.stream {
            await registry.recordAcknowledged(device: device, stream: stream, seq: header.seq, sha256: digest)
        }
        logger.info("segment \(header.seq) verified", metadata: ["device": "\(device)", "bytes": "\(data.count)"])
        if let folder = settings.keepDir {
            let file = URL(fileURLWithPath: folder).appendingPathComponent("\(device)-\(String(format: "%06d", header.seq)).mp4")
            do { try data.write(to: file, options: .atomic) } catch {
                logger.error("cannot keep segment \(header.seq) in \(folder): \(error.localizedDescription)")
            }
        }
        let segment = ReceivedSegment(device: device, locale: agent.locale, header: header, data: data)
        do {
            if let guidance = try await analyzer.analyze(segment) {
                try await outbound.write(.text(ServerMessage.guidance(guidance).encoded()))
            }
        } catch {
            logger.error("analyzer failed on segment \(header.seq): \(error)")
            try await sendError(.internal, "analysis failed", seq: header.seq, outbound)
        }
        if let left = await registry.spend(device: device, milliseconds: header.durationMs) {
            try await outbound.write(.text(ServerMessage.usage(remainingSeconds: left).encoded()))
            if left == 0 {
                try await sendError(.quotaExhausted, "no guidance time left", seq: nil, outbound)
                try await outbound.close(.init(codeNumber: Int(CloseCode.quotaExhausted.rawValue)), reason: "quota exhausted")
            }
        }
    }

    private func sendError(_ code: ServerMessage.ErrorCode, _ text: String, seq: Int?, _ outbound: WebSocketOutboundWriter) async throws {
        logger.warning("session \(id): \(code.rawValue): \(text)", metadata: ["device": "\(device)"])
        try await outbound.write(.text(ServerMessage.error(code: code, message: text, seq: seq).encoded()))
    }

    /// No message for the idle timeout: close with 4001.
    private func watchIdle(lastActivity: Activity, outbound: WebSocketOutboundWriter) async throws {
        let timeout = Duration.seconds(settings.idleTimeoutSeconds)
        while true {
            let deadline = lastActivity.last + timeout
            if ContinuousClock.now >= deadline {
                logger.notice("session \(id): idle for \(settings.idleTimeoutSeconds) s, closing", metadata: ["device": "\(device)"])
                try await outbound.close(.init(codeNumber: Int(CloseCode.idle.rawValue)), reason: "idle")
                return
            }
            try await Task.sleep(until: deadline, clock: .continuous)
        }
    }
}

/// When the session last heard from its agent.
private final class Activity: Sendable {
    private let instant = Mutex(ContinuousClock.now)
    func touch() { instant.withLock { $0 = .now } }
    var last: ContinuousClock.Instant { instant.withLock { $0 } }
}
