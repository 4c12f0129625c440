import Foundation

/// Where the server keeps what each device was credited and what it spent: append-only usage
/// events keyed by `(device, stream, seq)`, credits, and a balance per device kept in the same
/// transaction as each event. SQLite (``SQLiteLedger``) on one server, PostgreSQL
/// (``PostgresLedger``) for a fleet.
///
/// A segment is charged at most once: ``charge(_:)`` on a key that is already there changes
/// nothing and says so, with the digest that was charged.
public protocol UsageLedger: Sendable {
    /// Records one analysed segment's spending, once per `(device, stream, seq)`.
    func charge(_ charge: UsageCharge) async throws -> ChargeResult
    /// Adds `seconds` (> 0) to the device's credit; returns its balance afterwards.
    func credit(device: String, seconds: Int, note: String) async throws -> DeviceBalance
    /// The device's totals (zeros for a device the ledger has never seen).
    func balance(device: String) async throws -> DeviceBalance
    /// Records the tokens a hosted model spent on one segment, once per `(device, stream, seq)`;
    /// they add to the device's token totals.
    func recordModelUsage(_ usage: ModelUsage) async throws
    /// Every device the ledger knows, sorted by device id.
    func balances() async throws -> [DeviceBalance]
    /// Closes the store; nothing may be called afterwards.
    func shutdown() async throws
}

/// One segment's spending, as the server charges it once the segment is verified.
public struct UsageCharge: Sendable, Equatable {
    public var device: String
    /// The agent's per-start stream id (or, for a `hello` without one, the session id).
    public var stream: String
    public var seq: Int
    /// Lower-case hex SHA-256 of the segment.
    public var sha256: String
    /// Whole seconds charged (the segment's duration rounded up), ≥ 0.
    public var seconds: Int
    /// The session's lease epoch, when sessions are leased (several instances): a charge from a
    /// session whose device has since been leased again is refused with ``LedgerError/fenced``.
    public var fence: LeaseFence? = nil
}

/// Tokens a hosted model (`analyzer.kind` gemini or openai) spent on one segment.
public struct ModelUsage: Sendable, Equatable {
    public var device: String
    public var stream: String
    public var seq: Int
    public var model: String
    public var inputTokens: Int
    public var outputTokens: Int
}

/// The lease a session holds: its device and the epoch it was given.
public struct LeaseFence: Sendable, Equatable {
    public var device: String
    public var epoch: Int64
}

public enum ChargeResult: Sendable, Equatable {
    /// A new event: the segment is charged.
    case charged(DeviceBalance)
    /// `(device, stream, seq)` was already charged, with this digest; nothing changed.
    case alreadyCharged(DeviceBalance, sha256: String)
}

/// A device's totals in the ledger.
public struct DeviceBalance: Sendable, Equatable, Codable {
    public var device: String
    /// Seconds credited by operators (`guidance-server credit`).
    public var creditedSeconds: Int = 0
    /// Seconds spent on analysed segments.
    public var spentSeconds: Int = 0
    /// Segments charged.
    public var segments: Int = 0
    /// Tokens hosted models read and wrote for this device's segments.
    public var inputTokens: Int = 0
    public var outputTokens: Int = 0

    /// Seconds left, given the allowance every device starts with (`usage.remainingSeconds`);
    /// `nil` (no allowance set) is unlimited. Never negative; saturates instead of trapping.
    public func remaining(allowance: Int?) -> Int? {
        guard let allowance else { return nil }
        let (total, overflow) = allowance.addingReportingOverflow(creditedSeconds)
        guard !overflow else { return Int.max }
        let (left, under) = total.subtractingReportingOverflow(spentSeconds)
        return under ? 0 : max(0, left)
    }
}

public enum LedgerError: Error, CustomStringConvertible, Equatable {
    /// The charge's lease epoch is no longer the device's: a newer session owns it.
    case fenced(device: String, epoch: Int64)
    /// A value the ledger refuses (negative seconds, an empty device id, …).
    case invalid(String)
    /// The store could not be opened or used.
    case unavailable(String)

    public var description: String {
        switch self {
        case .fenced(let device, let epoch): "lease epoch \(epoch) of \(device) was superseded"
        case .invalid(let what): what
        case .unavailable(let what): what
        }
    }
}
