import HAL
public import Logging
public import ServiceLifecycle
import Synchronization

/// Pairs the car while it has neither a token file nor credentials: runs
/// ``DevicePairing/StateMachine`` against the server (``PairingClient``), says each code through
/// the status voice (and logs it, grouped, for whoever installs the car), stores what it gets
/// in ``DeviceCredentials``, and starts again whenever the credentials are forgotten (the
/// server refused them). Recording never waits for it; the uplink connects once credentials exist.
public final class DevicePairingService: Service, Sendable {
    let client: PairingClient
    let credentials: DeviceCredentials
    let deviceName: String
    /// Whether a static token file makes pairing moot right now (read at each start).
    let hasToken: @Sendable () -> Bool
    let announcer: StatusAnnouncer
    /// Told when credentials were stored (the uplink connects at once).
    let paired: @Sendable () async -> Void
    let logger: Logger
    private let repeats: AsyncStream<Void>.Continuation
    private let repeatRequests: AsyncStream<Void>
    private let shown = Mutex<String?>(nil)
    private let lastProblem = Mutex<String?>(nil)

    public init(
        client: PairingClient, credentials: DeviceCredentials, deviceName: String, hasToken: @escaping @Sendable () -> Bool,
        announcer: StatusAnnouncer, paired: @escaping @Sendable () async -> Void = {}, logger: Logger
    ) {
        self.paired = paired
        self.client = client
        self.credentials = credentials
        self.deviceName = deviceName
        self.hasToken = hasToken
        self.announcer = announcer
        self.logger = logger
        (repeatRequests, repeats) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// The code being offered now, grouped (`123 456 789`), for `status`; `nil` when not pairing.
    public var currentCode: String? { shown.withLock { $0 } }

    /// Say the code again (the `pair` request); `false` when there is none to say.
    public func repeatCode() -> Bool {
        guard currentCode != nil else { return false }
        repeats.yield()
        return true
    }

    public func run() async throws {
        defer { Task { [client] in await client.shutdown() } }
        await cancelWhenGracefulShutdown {
            var forgets = self.credentials.forgets.makeAsyncIterator()
            while !Task.isCancelled {
                if !self.credentials.isPaired && !self.hasToken() { await self.pair() }
                // Paired (or a token file): wait until the credentials are forgotten.
                guard await forgets.next() != nil else { return }
            }
        }
    }

    private enum Step: Sendable {
        case event(DevicePairing.StateMachine.Event)
        case repeatCode
    }

    /// One pairing, from the first code to stored credentials (or cancellation).
    private func pair() async {
        var machine = DevicePairing.StateMachine()
        var pending = machine.handle(.start, now: Self.now())
        let steps = AsyncStream<Step>.makeStream()
        let listener = Task { [repeatRequests] in
            for await _ in repeatRequests { steps.continuation.yield(.repeatCode) }
        }
        defer {
            listener.cancel()
            shown.withLock { $0 = nil }
        }
        var waiter: Task<Void, Never>?
        var iterator = steps.stream.makeAsyncIterator()
        while !Task.isCancelled {
            for action in pending { waiter = carry(action, steps: steps.continuation) ?? waiter }
            pending = []
            if machine.isPaired { return }
            guard
                let step = await withTaskCancellationHandler(
                    operation: { await iterator.next() }, onCancel: { steps.continuation.finish() })
            else { waiter?.cancel(); return }
            switch step {
            case .event(let event): pending = machine.handle(event, now: Self.now())
            case .repeatCode: pending = machine.handle(.repeatCode, now: Self.now())
            }
        }
        waiter?.cancel()
    }

    /// Starts what `action` asks; a timed call answers into `steps` later (its task returned).
    private func carry(_ action: DevicePairing.StateMachine.Action, steps: AsyncStream<Step>.Continuation) -> Task<Void, Never>? {
        switch action {
        case .requestCode(let at):
            return Task { [self] in
                guard await Self.sleep(until: at) else { return }
                do {
                    let code = try await self.client.requestCode(deviceName: self.deviceName)
                    self.logger.notice(
                        "pairing: enter the code \(Self.grouped(code.userCode)) at \(code.verificationURI) within \(code.expiresIn / 60) minutes"
                    )
                    steps.yield(
                        .event(
                            .codeIssued(
                                deviceCode: code.deviceCode, userCode: code.userCode, expiresIn: code.expiresIn, interval: code.interval)))
                } catch {
                    // Said once per kind of failure (a server without pairing answers 404 to every try).
                    let problem = "\(error)"
                    if self.lastProblem.withLock({ last in
                        defer { last = problem }; return last != problem
                    }) {
                        self.logger.warning("pairing: the server gave no code (\(problem)); asking again, up to a minute apart")
                    }
                    steps.yield(.event(.requestFailed))
                }
            }
        case .poll(let deviceCode, let at):
            return Task { [client] in
                guard await Self.sleep(until: at) else { return }
                steps.yield(.event(.pollAnswered(await client.poll(deviceCode: deviceCode))))
            }
        case .announce(let userCode):
            shown.withLock { $0 = Self.grouped(userCode) }
            Task { [announcer] in await announcer.say(.pairingCode(userCode)) }
            return nil
        case .store(let paired):
            do {
                try credentials.store(paired)
                logger.notice("pairing: this car is \(paired.deviceId), paired with the account of \(paired.ownerName)")
                Task { [self] in await self.paired() }
            } catch {
                logger.error("pairing: cannot keep the credentials in \(credentials.path): \(error)")
            }
            return nil
        case .announcePaired(let owner):
            Task { [announcer] in await announcer.say(.paired(owner: owner)) }
            return nil
        }
    }

    static func grouped(_ code: String) -> String {
        stride(from: 0, to: code.count, by: 3).map { offset in
            let start = code.index(code.startIndex, offsetBy: offset)
            return String(code[start..<code.index(start, offsetBy: min(3, code.count - offset))])
        }.joined(separator: " ")
    }

    /// Milliseconds on the monotonic clock.
    static func now() -> UInt64 { MonotonicClock.now() / 1_000_000 }

    private static func sleep(until at: UInt64) async -> Bool {
        let now = now()
        if at > now { try? await Task.sleep(for: .milliseconds(Int64(at - now))) }
        return !Task.isCancelled
    }
}
