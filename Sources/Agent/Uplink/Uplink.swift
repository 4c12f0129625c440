import Foundation
public import GuidanceProtocol
import HTTPTypes
public import HAL
public import Logging
import NIOCore
public import NIOSSL
import NIOWebSocket
import WSClient

/// Streams segments to the guidance server and hands its answers back.
///
/// `enqueue(_:)` never waits for the network. ``run(networkChanges:)`` keeps one session open:
/// it reconnects with ``Backoff`` when the server goes away or the connection silently dies
/// (pings unanswered), waits long after an auth refusal, and on a network change closes the
/// session with 1001 and opens a new one at once.
public actor Uplink {
    public struct Settings: Sendable {
        public var url: String
        public var token: String
        /// `nil` for `ws://`.
        public var tls: TLSConfiguration?
        public var hello: ClientMessage.Hello
        public var payload: AgentConfig.Payload
        public var ping: Duration
        public var backoff: Backoff
        public var queueSegments: Int
        public var queueMaxAgeMs: Int
        public var guidanceMaxAgeMs: Int

        public init(url: String, token: String, tls: TLSConfiguration?, hello: ClientMessage.Hello,
                    payload: AgentConfig.Payload, ping: Duration, backoff: Backoff = Backoff(), queueSegments: Int,
                    queueMaxAgeMs: Int, guidanceMaxAgeMs: Int) {
            self.url = url
            self.token = token
            self.tls = tls
            self.hello = hello
            self.payload = payload
            self.ping = ping
            self.backoff = backoff
            self.queueSegments = queueSegments
            self.queueMaxAgeMs = queueMaxAgeMs
            self.guidanceMaxAgeMs = guidanceMaxAgeMs
        }
    }

    public struct Stats: Sendable, Equatable {
        public var sent = 0
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
        case stopped
    }

    /// Every readable server message, in order (stale guidance excluded).
    public nonisolated let messages: AsyncStream<ServerMessage>
    private let messageSink: AsyncStream<ServerMessage>.Continuation
    /// Every change of ``state``, in order.
    public nonisolated let states: AsyncStream<ConnectionState>
    private let stateSink: AsyncStream<ConnectionState>.Continuation
    public private(set) var state = ConnectionState.connecting {
        didSet { if state != oldValue { stateSink.yield(state) } }
    }
    /// When the current session opened, if one is open.
    public private(set) var sessionOpenedAt: ContinuousClock.Instant?

    private let settings: Settings
    private let logger: Logger
    private var queue: SendQueue
    private var backoff: Backoff
    public private(set) var stats = Stats()
    /// Uploads stop on 4402 until usage comes back; recording goes on.
    public private(set) var paused = false
    private var captureTimes: [Int: UInt64] = [:]
    private var wake: AsyncStream<Void>.Continuation?
    private var closeSession: (@Sendable () async -> Void)?
    private var networkChanged = false
    private var stopping = false
    private var backoffSleep: Task<Void, Never>?
    private var lastDropLog: ContinuousClock.Instant?

    public init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        self.queue = SendQueue(maxCount: settings.queueSegments, maxAgeMs: settings.queueMaxAgeMs)
        self.backoff = settings.backoff
        (messages, messageSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
        (states, stateSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
    }

    /// Queues a finished segment for sending; drops the oldest when over a bound.
    public func enqueue(_ segment: Segment) {
        let dropped = queue.push(segment, now: MonotonicClock.now())
        countDrops(dropped.count)
        wake?.yield()
    }

    /// Runs sessions until ``shutdown(flushFor:)`` or cancellation; each network change opens a new session.
    public func run(networkChanges: AsyncStream<NetworkChange>) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                for await change in networkChanges { await self.networkDidChange(change) }
            }
            await connectForever()
            group.cancelAll()
        }
        state = .stopped
        messageSink.finish()
        stateSink.finish()
    }

    // MARK: - Sessions

    private enum Outcome {
        case closed(WebSocketErrorCode?, lived: Duration)
        case failed(any Error)
    }

    /// Sends what is queued if a session is open, then closes it with 1001 and stops reconnecting.
    public func shutdown(flushFor timeout: Duration = .seconds(2)) async {
        let deadline = ContinuousClock.now + timeout
        while !queue.items.isEmpty, closeSession != nil, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        stopping = true
        backoffSleep?.cancel()
        await closeSession?()
    }

    private func connectForever() async {
        while !Task.isCancelled && !stopping {
            state = .connecting
            let outcome = await connectOnce()
            if Task.isCancelled || stopping { return }
            stats.reconnects += 1
            var delay: Duration
            var refused = false
            if networkChanged {
                networkChanged = false
                backoff.reset()
                delay = .zero
            } else {
                switch outcome {
                case .closed(let code, let lived):
                    if code == .init(codeNumber: Int(CloseCode.unauthorized.rawValue)) {
                        logger.error("uplink: authentication failed (the server closed with 4401); retrying in \(backoff.authFailure.spoken)")
                        delay = backoff.authFailure
                        refused = true
                    } else {
                        if code == .init(codeNumber: Int(CloseCode.quotaExhausted.rawValue)) { paused = true }
                        delay = backoff.next(sessionLived: lived)
                        logger.warning("uplink: session closed (\(code.map { "\($0)" } ?? "no close code: the connection dropped, a message was too big or pings went unanswered")); reconnecting in \(delay.spoken)")
                    }
                case .failed(let error as WebSocketClientError) where error == .webSocketUpgradeFailed:
                    // The reference server refuses an upgrade only for a bad token (HTTP 401); the
                    // client cannot see the status, so any refused upgrade counts as one.
                    logger.error("uplink: authentication failed: the server refused the upgrade (check uplink.tokenFile); retrying in \(backoff.authFailure.spoken)")
                    delay = backoff.authFailure
                    refused = true
                case .failed(let error):
                    delay = backoff.next(sessionLived: nil)
                    logger.warning("uplink: cannot reach \(settings.url): \(error); retrying in \(delay.spoken)")
                }
            }
            state = refused ? .authenticationFailed(retryIn: delay) : .disconnected(retryIn: delay)
            await sleep(delay)
        }
    }

    private func connectOnce() async -> Outcome {
        let started = ContinuousClock.now
        var configuration = WebSocketClientConfiguration(
            maxFrameSize: GuidanceProtocol.maxMessageBytes,
            additionalHeaders: [.authorization: "Bearer \(settings.token)"],
            autoPing: .enabled(timePeriod: settings.ping))
        configuration.validateUTF8 = true
        do {
            let close = try await WebSocketClient.connect(
                url: settings.url, configuration: configuration, tlsConfiguration: settings.tls, logger: logger
            ) { inbound, outbound, _ in
                let wakeUps = await self.sessionOpened(outbound: outbound)
                do {
                    try await outbound.write(.text(ClientMessage.hello(self.settings.hello).encoded()))
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { try await self.sendLoop(outbound: outbound, wakeUps: wakeUps) }
                        for try await message in inbound.messages(maxSize: GuidanceProtocol.maxMessageBytes) {
                            await self.receive(message)
                        }
                        group.cancelAll()
                    }
                } catch {
                    await self.sessionEnded()
                    throw error
                }
                await self.sessionEnded()
            }
            return .closed(close?.closeCode, lived: ContinuousClock.now - started)
        } catch {
            return .failed(error)
        }
    }

    private func sessionOpened(outbound: WebSocketOutboundWriter) -> AsyncStream<Void> {
        let (wakeUps, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        wake = continuation
        continuation.yield()
        closeSession = { try? await outbound.close(.goingAway, reason: "going away") }
        sessionOpenedAt = .now
        stats.sessions += 1
        return wakeUps
    }

    private func sessionEnded() {
        wake?.finish()
        wake = nil
        closeSession = nil
        sessionOpenedAt = nil
    }

    private func networkDidChange(_ change: NetworkChange) async {
        logger.notice("uplink: network changed (\(change)); opening a new session")
        networkChanged = true
        backoffSleep?.cancel()
        await closeSession?()
    }

    /// Sleeps, unless a network change comes first.
    private func sleep(_ delay: Duration) async {
        guard delay > .zero else { return }
        let task = Task { _ = try? await Task.sleep(for: delay) }
        backoffSleep = task
        await task.value
        backoffSleep = nil
    }

    // MARK: - Sending

    private func sendLoop(outbound: WebSocketOutboundWriter, wakeUps: AsyncStream<Void>) async throws {
        for await _ in wakeUps {
            while let segment = nextToSend() {
                try await send(segment, outbound: outbound)
            }
        }
    }

    private func nextToSend() -> Segment? {
        guard !paused else { return nil }
        let (next, expired) = queue.pop(now: MonotonicClock.now())
        countDrops(expired.count)
        return next
    }

    private func send(_ segment: Segment, outbound: WebSocketOutboundWriter) async throws {
        let m = segment.metadata
        let chunkSize = GuidanceProtocol.maxMessageBytes
        let chunks = (segment.data.count + chunkSize - 1) / chunkSize
        let base64 = settings.payload == .base64
        let header = ClientMessage.SegmentHeader(
            seq: m.seq, capturedAt: m.capturedAt.rfc3339Milliseconds,
            durationMs: m.durationMs, frames: m.frames, bytes: m.bytes, sha256: m.sha256,
            chunks: base64 ? nil : chunks, data: base64 ? Data(segment.data).base64EncodedString() : nil)
        captureTimes[m.seq] = m.captureStartMonotonicNs
        if captureTimes.count > 64, let oldest = captureTimes.keys.min() { captureTimes[oldest] = nil }
        try await outbound.write(.text(ClientMessage.segment(header).encoded()))
        if !base64 {
            for start in stride(from: 0, to: segment.data.count, by: chunkSize) {
                try await outbound.write(.binary(ByteBuffer(bytes: segment.data[start..<min(start + chunkSize, segment.data.count)])))
            }
        }
        stats.sent += 1
        let sinceClosedUs = MonotonicClock.now().subtractingReportingOverflow(segment.closedMonotonicNs).partialValue / 1000
        logger.debug("uplink: segment \(m.seq) sent, last byte written \(Double(sinceClosedUs) / 1000) ms after it closed",
                     metadata: ["bytes": "\(m.bytes)", "chunks": "\(base64 ? 0 : chunks)"])
    }

    private func countDrops(_ count: Int) {
        guard count > 0 else { return }
        stats.dropped += count
        // At most one line per interval, however fast drops come.
        let now = ContinuousClock.now
        if let last = lastDropLog, now - last < .seconds(10) { return }
        lastDropLog = now
        logger.warning("uplink: dropped \(count) segment(s) the network could not carry in time", metadata: ["droppedTotal": "\(stats.dropped)"])
    }

    // MARK: - Receiving

    private func receive(_ message: WebSocketMessage) {
        guard case .text(let text) = message else {
            logger.warning("uplink: ignoring a binary message from the server")
            return
        }
        let decoded: ServerMessage
        do {
            decoded = try ServerMessage.decode(text)
        } catch {
            logger.warning("uplink: ignoring an unreadable server message: \(error)")
            return
        }
        switch decoded {
        case .welcome(let session, let remaining):
            logger.info("uplink: session \(session) open", metadata: ["remainingSeconds": "\(remaining.map(String.init) ?? "unlimited")"])
            state = .connected(session: session)
            resume(remaining: remaining)
        case .ack:
            stats.acked += 1
        case .guidance(let guidance):
            // A file or test pattern played fast has capture times ahead of the clock: not stale.
            let now = MonotonicClock.now()
            if let captured = captureTimes[guidance.seq], now > captured, now - captured > UInt64(settings.guidanceMaxAgeMs) * 1_000_000 {
                stats.staleGuidance += 1
                logger.notice("uplink: dropped stale guidance for segment \(guidance.seq)")
                return
            }
        case .usage(let remaining):
            resume(remaining: remaining)
        case .error(let code, let text, let seq):
            logger.warning("uplink: server error \(code.rawValue): \(text)", metadata: seq.map { ["seq": "\($0)"] } ?? [:])
            if code == .quotaExhausted { paused = true }
        case .unknown(let type):
            logger.debug("uplink: ignoring message type \(type)")
            return
        }
        messageSink.yield(decoded)
    }

    private func resume(remaining: Int?) {
        guard paused, remaining.map({ $0 > 0 }) ?? true else { return }
        paused = false
        logger.notice("uplink: usage available again; uploads resume")
        wake?.yield()
    }
}
