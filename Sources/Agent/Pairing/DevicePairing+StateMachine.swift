/// How a car with no token and no stored credentials pairs itself to its owner's account (the
/// device side of RFC 8628): it asks the server for a code, says the code aloud, polls at the
/// interval the server gives (five seconds more at each `slow_down`), asks for a new code only
/// once the old one has expired (and says the new one), and on success stores its credentials
/// and says whose account it joined. Recording never waits for any of it.
///
/// Pure: time (milliseconds on a monotonic clock) and the server's answers come in, actions go
/// out; ``DevicePairingService`` carries them out.
public enum DevicePairing {
    public struct Credentials: Sendable, Equatable, Codable {
        public var deviceId: String
        public var ownerName: String
        public var accessToken: String
        public var refreshToken: String
        /// Seconds the access token is good for from when it was received.
        public var expiresIn: Int
    }

    /// What the server said to one poll of its token endpoint.
    public enum PollAnswer: Sendable, Equatable {
        case pending
        case slowDown
        case expired
        case denied
        case paired(Credentials)
        /// No answer (network, server down, something unreadable): the code still holds.
        case failed
    }

    public struct StateMachine: Sendable {
        public enum Event: Sendable, Equatable {
            case start
            case codeIssued(deviceCode: String, userCode: String, expiresIn: Int, interval: Int)
            case requestFailed
            case pollAnswered(PollAnswer)
            /// The driver (or `dashcam-agent pair`) asked to hear the code again.
            case repeatCode
        }

        public enum Action: Sendable, Equatable {
            /// Ask the server for a code at `at`.
            case requestCode(at: UInt64)
            /// Poll the token endpoint with `deviceCode` at `at`.
            case poll(deviceCode: String, at: UInt64)
            /// Say the code (the phrase says it twice).
            case announce(userCode: String)
            case store(Credentials)
            case announcePaired(ownerName: String)
        }

        struct Code: Sendable, Equatable {
            var deviceCode: String
            var userCode: String
            var expiresAt: UInt64
            var intervalMs: UInt64
        }

        enum State: Sendable, Equatable {
            case idle
            case requesting(failures: Int)
            case waiting(Code)
            case paired
        }

        private(set) var state: State = .idle
        /// A new code is asked for after a failed request this long, doubling up to a minute.
        static let retryBaseMs: UInt64 = 5_000
        static let retryCapMs: UInt64 = 60_000
        static let slowDownMs: UInt64 = 5_000

        public init() {}

        public var userCode: String? {
            if case .waiting(let code) = state { code.userCode } else { nil }
        }

        public var isPaired: Bool { state == .paired }

        public mutating func handle(_ event: Event, now: UInt64) -> [Action] {
            switch (state, event) {
            case (.idle, .start):
                state = .requesting(failures: 0)
                return [.requestCode(at: now)]
            case (.requesting, .codeIssued(let deviceCode, let userCode, let expiresIn, let interval)):
                // Numbers from the network are bounded before any arithmetic: a code lasts 1 s to
                // an hour, the interval 1 s to 10 minutes (5 s when the server gives none).
                let life = UInt64(min(max(expiresIn, 1), 3600)) * 1000
                let every = UInt64(interval > 0 ? min(interval, 600) : 5) * 1000
                let code = Code(deviceCode: deviceCode, userCode: userCode, expiresAt: now + life, intervalMs: every)
                state = .waiting(code)
                return [.announce(userCode: userCode), .poll(deviceCode: deviceCode, at: now + every)]
            case (.requesting(let failures), .requestFailed):
                state = .requesting(failures: failures + 1)
                let delay = min(Self.retryCapMs, Self.retryBaseMs << UInt64(min(failures, 8)))
                return [.requestCode(at: now + delay)]
            case (.waiting(var code), .pollAnswered(let answer)):
                switch answer {
                case .paired(let credentials):
                    state = .paired
                    return [.store(credentials), .announcePaired(ownerName: credentials.ownerName)]
                case .expired, .denied:
                    return renew(now: now)
                case .slowDown:
                    code.intervalMs = min(code.intervalMs + Self.slowDownMs, 600_000)
                    state = .waiting(code)
                    fallthrough
                case .pending, .failed:
                    if now >= code.expiresAt { return renew(now: now) }
                    return [.poll(deviceCode: code.deviceCode, at: now + code.intervalMs)]
                }
            case (.waiting(let code), .repeatCode):
                return [.announce(userCode: code.userCode)]
            default:
                return []
            }
        }

        /// The code is over: a new one, said again when it comes.
        private mutating func renew(now: UInt64) -> [Action] {
            state = .requesting(failures: 0)
            return [.requestCode(at: now)]
        }
    }
}
