import Foundation

/// One pending pairing by the OAuth 2.0 Device Authorization Grant (RFC 8628), and its rules, with
/// no storage or socket in sight: time is passed in (milliseconds since the Unix epoch, as the
/// ledger stores it), so every outcome is tested without waiting.
///
/// A car asks for a code (`POST /oauth/device_authorization`), says the user code aloud, and polls
/// `POST /oauth/token` with its device code at ``interval`` until the owner, signed in on the web
/// page, approves or denies the code, or it expires. The device code itself is only ever stored
/// as a hash (``DeviceCodes``).
public struct DeviceAuthorization: Sendable, Equatable {
    public enum State: Sendable, Equatable {
        /// Waiting for an owner to enter the user code.
        case pending
        /// An owner approved: the device's next poll gets its credentials.
        case approved(owner: Int64)
        /// An owner said no.
        case denied
        /// The device has its credentials: the device code is spent.
        case redeemed
    }

    /// The rules' numbers; the defaults are RFC 8628's (§3.2, §3.5) and the issue's.
    public struct Settings: Sendable, Equatable {
        /// How long a code is good for: 10 minutes.
        public var lifetimeMs: Int64 = 600_000
        /// The polling interval first given to the device, seconds (the RFC's default, 5).
        public var intervalSeconds = 5
        /// What `slow_down` adds to the interval, seconds (§3.5: 5).
        public var slowDownSeconds = 5
        /// The interval never grows past this: a device that keeps polling too fast is told to wait
        /// a minute, not a number that overflows.
        public var maxIntervalSeconds = 60

        public init() {}
    }

    public private(set) var state: State
    public let issuedAtMs: Int64
    public let expiresAtMs: Int64
    /// Seconds the device must leave between polls; grows by `slow_down`.
    public private(set) var intervalSeconds: Int
    /// When the device last polled, to tell `slow_down`; `nil` before its first poll.
    public private(set) var lastPolledAtMs: Int64?
    /// What the device calls itself (its `device_id`), shown on the approval page so the owner
    /// knows which car they authorise (RFC 8628 §5.4).
    public let deviceName: String

    public init(deviceName: String, nowMs: Int64, settings: Settings = .init()) {
        self.init(
            state: .pending, issuedAtMs: nowMs, expiresAtMs: nowMs + settings.lifetimeMs,
            intervalSeconds: settings.intervalSeconds, lastPolledAtMs: nil, deviceName: deviceName)
    }

    /// As read back from storage.
    public init(state: State, issuedAtMs: Int64, expiresAtMs: Int64, intervalSeconds: Int, lastPolledAtMs: Int64?, deviceName: String) {
        self.state = state
        self.issuedAtMs = issuedAtMs
        self.expiresAtMs = expiresAtMs
        self.intervalSeconds = intervalSeconds
        self.lastPolledAtMs = lastPolledAtMs
        self.deviceName = deviceName
    }

    public func isExpired(nowMs: Int64) -> Bool { nowMs >= expiresAtMs }

    /// Whole seconds left, for `expires_in`.
    public func secondsLeft(nowMs: Int64) -> Int { Int(max(0, (expiresAtMs - nowMs + 999) / 1000)) }

    /// The answer to one poll of the token endpoint (RFC 8628 §3.5).
    public enum PollOutcome: Sendable, Equatable {
        case authorizationPending
        /// Polled sooner than the interval allows; the interval is now `interval` seconds.
        case slowDown(interval: Int)
        case expiredToken
        case accessDenied
        /// Hand the device its credentials for this owner's account; the code is now spent.
        case issue(owner: Int64)
        /// The code was already redeemed: `invalid_grant`.
        case invalidGrant

        /// The error code of RFC 8628 §3.5 / RFC 6749 §5.2; `nil` for ``issue(owner:)``.
        public var error: String? {
            switch self {
            case .authorizationPending: "authorization_pending"
            case .slowDown: "slow_down"
            case .expiredToken: "expired_token"
            case .accessDenied: "access_denied"
            case .invalidGrant: "invalid_grant"
            case .issue: nil
            }
        }
    }

    /// One poll by the device at `nowMs`.
    public mutating func poll(nowMs: Int64, settings: Settings = .init()) -> PollOutcome {
        if case .redeemed = state { return .invalidGrant }
        if isExpired(nowMs: nowMs) { return .expiredToken }
        switch state {
        case .denied:
            return .accessDenied
        case .approved(let owner):
            // Credentials are handed out however soon the device asks: there is nothing to wait for.
            state = .redeemed
            lastPolledAtMs = nowMs
            return .issue(owner: owner)
        case .pending, .redeemed:
            break
        }
        defer { lastPolledAtMs = nowMs }
        if let last = lastPolledAtMs, nowMs - last < Int64(intervalSeconds) * 1000 {
            intervalSeconds = min(settings.maxIntervalSeconds, intervalSeconds + settings.slowDownSeconds)
            return .slowDown(interval: intervalSeconds)
        }
        return .authorizationPending
    }

    public enum Decision: Sendable, Equatable {
        case approve(owner: Int64)
        case deny
    }

    public enum DecisionOutcome: Sendable, Equatable {
        case decided
        case expired
        /// Approved or denied before (perhaps by another owner who had the same code read out).
        case alreadyDecided
    }

    /// An owner's answer on the web page.
    public mutating func decide(_ decision: Decision, nowMs: Int64) -> DecisionOutcome {
        guard case .pending = state else { return .alreadyDecided }
        if isExpired(nowMs: nowMs) { return .expired }
        switch decision {
        case .approve(let owner): state = .approved(owner: owner)
        case .deny: state = .denied
        }
        return .decided
    }
}

/// The codes of a pairing: a device code only the device holds (stored as its SHA-256), and a user
/// code of nine digits, which a car says aloud in groups of three: digits, because letters are
/// confused by ear (RFC 8628 §6.1: about 30 bits, so entry is rate-limited, ``CodeEntryLimiter``).
public enum DeviceCodes {
    /// 32 random bytes, base64url without padding.
    public static func newDeviceCode<G: RandomNumberGenerator>(using generator: inout G) -> String {
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return AccessTokens.base64URL(Data(bytes))
    }

    /// Nine digits, any of the 10^9 equally likely.
    public static func newUserCode<G: RandomNumberGenerator>(using generator: inout G) -> String {
        let value = UInt32.random(in: 0..<1_000_000_000, using: &generator)
        let digits = String(value)
        return String(repeating: "0", count: 9 - digits.count) + digits
    }

    /// `123 456 789`: how the page and the agent's log show a code.
    public static func grouped(_ userCode: String) -> String {
        var out = ""
        for (index, character) in userCode.enumerated() {
            if index > 0, index % 3 == 0 { out.append(" ") }
            out.append(character)
        }
        return out
    }

    /// What an owner typed, as a user code: the nine digits, with spaces, dashes and dots ignored
    /// (RFC 8628 §6.1); `nil` when anything else is there or the count is wrong.
    public static func normalize(_ typed: String) -> String? {
        var digits = ""
        for character in typed.unicodeScalars {
            switch character {
            case "0"..."9":
                digits.unicodeScalars.append(character)
                if digits.count > 9 { return nil }
            case " ", "-", ".", "\t":
                continue
            default:
                return nil
            }
        }
        return digits.count == 9 ? digits : nil
    }
}
