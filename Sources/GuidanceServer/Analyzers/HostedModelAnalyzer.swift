public import AsyncHTTPClient
public import Foundation
public import GuidanceProtocol
public import Logging
import NIOCore
import NIOFoundationCompat
public import NIOHTTP1
import Synchronization

/// One hosted model's HTTP API: how a segment becomes an HTTP request, and how a reply becomes
/// an answer. ``GeminiEndpoint`` and ``OpenAIChatEndpoint`` are the two; ``HostedModelAnalyzer``
/// does the calling.
public protocol ModelEndpoint: Sendable {
    /// For logs: `gemini`, `openai`.
    var name: String { get }
    /// The model id, as the ledger records it with the tokens.
    var model: String { get }
    /// The request for `segment` (its body built from the clip: base64 video, or keyframes).
    func request(for segment: ReceivedSegment) async throws -> HTTPClientRequest
    /// A 2xx body: the answer (nil if it is not the schema's object) and the tokens spent.
    func parse(_ body: Data) -> (answer: ModelAnswer?, usage: ModelTokens?)
    /// The wait an error reply asks for, from its headers or body.
    func retryDelay(headers: HTTPHeaders, body: Data) -> Duration?
}

/// Why a hosted model gave no guidance for a segment.
public enum ModelCallError: Error, CustomStringConvertible, Equatable {
    /// The breaker is open (the service failed segment after segment): not called at all. The
    /// agent hears "guidance unavailable" once.
    case unavailable(service: String)
    /// Every attempt failed, the last like this.
    case failed(service: String, HostedModelAnalyzer.StateMachine.Outcome)

    public var description: String {
        switch self {
        case .unavailable(let service): "\(service) is unavailable; not called until it recovers"
        case .failed(let service, let outcome): "\(service) gave no answer: \(outcome)"
        }
    }
}

/// Calls a hosted model for each segment, within `timeout` from the segment's arrival: retries
/// what ``HostedModelAnalyzer.StateMachine`` says is worth it, waits as the service asks, and stops calling a service
/// that is down (circuit breaker). Token counts go to the usage ledger.
public final class HostedModelAnalyzer: SegmentAnalyzer {
    public let endpoint: any ModelEndpoint
    public let timeout: Duration
    private let rules: Mutex<HostedModelAnalyzer.StateMachine>
    private let ledger: (any UsageLedger)?
    private let client: HTTPClient
    private let logger: Logger
    /// Largest reply read; a bigger one is a malformed answer.
    static let maxReplyBytes = 1 << 20

    public init(
        endpoint: any ModelEndpoint, timeout: Duration, rules: HostedModelAnalyzer.StateMachine.Settings = .init(),
        ledger: (any UsageLedger)?, client: HTTPClient = .shared, logger: Logger
    ) {
        self.endpoint = endpoint
        self.timeout = timeout
        self.rules = Mutex(HostedModelAnalyzer.StateMachine(settings: rules))
        self.ledger = ledger
        self.client = client
        self.logger = logger
    }

    /// The breaker's state, for tests and logs.
    public var breaker: HostedModelAnalyzer.StateMachine.Breaker { rules.withLock { $0.breaker } }

    public func analyze(_ segment: ReceivedSegment) async throws -> ServerMessage.Guidance? {
        let started = ContinuousClock.now
        guard rules.withLock({ $0.admit(device: segment.device, now: started) }) == .call else {
            throw ModelCallError.unavailable(service: endpoint.name)
        }
        let deadline = started.advanced(by: timeout)
        var last = HostedModelAnalyzer.StateMachine.Outcome.transport
        do {
            let request = try await endpoint.request(for: segment)
            var attempt = 1
            while true {
                let (outcome, body) = await call(request, deadline: deadline)
                try Task.checkCancellation()
                last = outcome
                if outcome == .answered {
                    let (answer, usage) = endpoint.parse(body)
                    if let usage { await record(usage, for: segment) }
                    guard let answer else {
                        last = .malformed
                        break
                    }
                    rules.withLock { $0.finished(device: segment.device, succeeded: true, lastOutcome: .answered, now: .now) }
                    return answer.guidance(seq: segment.header.seq, locale: segment.locale)
                }
                guard
                    let wait = rules.withLock({
                        $0.retry(after: outcome, attempt: attempt, now: .now, deadline: deadline, jitter: Double.random(in: 0...1))
                    })
                else { break }
                logger.info(
                    "\(endpoint.name): attempt \(attempt) for segment \(segment.header.seq): \(outcome); again in \(wait)",
                    metadata: ["device": "\(segment.device)"])
                try await Task.sleep(for: wait)
                attempt += 1
            }
        } catch is CancellationError {
            // The session ended: no verdict on the service.
            rules.withLock { $0.abandoned(now: .now) }
            throw CancellationError()
        } catch {
            // The request could not be built (the clip does not decode): not the service's fault.
            rules.withLock { $0.abandoned(now: .now) }
            throw error
        }
        let opened = rules.withLock { rules -> Bool in
            rules.finished(device: segment.device, succeeded: false, lastOutcome: last, now: .now)
            if case .open = rules.breaker { return true }
            return false
        }
        if opened {
            logger.warning("\(endpoint.name) is failing (\(last)): not called for \(rules.withLock { $0.settings.openFor })")
            throw ModelCallError.unavailable(service: endpoint.name)
        }
        throw ModelCallError.failed(service: endpoint.name, last)
    }

    /// One attempt, ended by its reply or by `deadline`.
    private func call(_ request: HTTPClientRequest, deadline: ContinuousClock.Instant) async -> (
        HostedModelAnalyzer.StateMachine.Outcome, Data
    ) {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return (.transport, Data()) }
        let (seconds, attoseconds) = left.components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        do {
            let response = try await client.execute(request, deadline: .now() + .nanoseconds(nanoseconds))
            let body = try await response.body.collect(upTo: Self.maxReplyBytes)
            let data = Data(buffer: body)
            let status = Int(response.status.code)
            if (200..<300).contains(status) { return (.answered, data) }
            return (.status(status, retryAfter: endpoint.retryDelay(headers: response.headers, body: data)), data)
        } catch let error as NIOTooManyBytesError {
            logger.warning("\(endpoint.name): reply larger than \(Self.maxReplyBytes) bytes: \(error)")
            return (.malformed, Data())
        } catch {
            return (.transport, Data())
        }
    }

    private func record(_ tokens: ModelTokens, for segment: ReceivedSegment) async {
        guard let ledger else { return }
        do {
            try await ledger.recordModelUsage(
                ModelUsage(
                    device: segment.device, stream: segment.stream, seq: segment.header.seq, model: endpoint.model,
                    inputTokens: tokens.input, outputTokens: tokens.output))
        } catch {
            logger.error(
                "cannot record \(endpoint.name)'s tokens for segment \(segment.header.seq): \(error)",
                metadata: ["device": "\(segment.device)"])
        }
    }

    /// `Retry-After` as seconds (an HTTP date is not worth a clock for; ignored).
    static func retryAfter(_ headers: HTTPHeaders) -> Duration? {
        guard let value = headers.first(name: "retry-after"), let seconds = Int(value.trimmingCharacters(in: .whitespaces)),
            (0...86_400).contains(seconds)
        else { return nil }
        return .seconds(seconds)
    }
}
