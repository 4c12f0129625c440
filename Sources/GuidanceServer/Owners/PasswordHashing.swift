import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// bcrypt for the owners' pages, on a thread of its own with a bound on the work waiting for it.
///
/// A hash takes about a quarter of a second on purpose. On the thread pool every SQLite query
/// runs on, eight anonymous `POST /set-password` requests in flight held a pairing request for
/// seconds; here they hold only each other, and past ``maxWaiting`` the page answers 503 at once.
/// The pages call it only after every cheap check (the form, the link, the limits) has passed.
final class PasswordHashing: Sendable {
    static let shared = PasswordHashing()

    /// Hashes waiting or running at most; more are refused, not queued.
    static let maxWaiting = 4
    static let cost: UInt8 = 12

    private let pool: NIOThreadPool
    private let waiting = Atomic<Int>(0)

    private init() {
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
    }

    /// Too many hashes are waiting: try again in a moment.
    struct Busy: Error {}

    func hash(_ password: String) async throws -> String {
        try await run { Bcrypt.hash(password, cost: Self.cost) }
    }

    func verify(_ password: String, hash: String) async throws -> Bool {
        try await run { Bcrypt.verify(password, hash: hash) }
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async throws -> T {
        guard waiting.add(1, ordering: .relaxed).newValue <= Self.maxWaiting else {
            waiting.subtract(1, ordering: .relaxed)
            throw Busy()
        }
        defer { waiting.subtract(1, ordering: .relaxed) }
        return try await pool.runIfActive(body)
    }
}

/// What a new password must be. bcrypt reads at most 72 bytes, and stops at the first NUL: a
/// longer password, or one with a NUL, would be cut silently and sign in with only its start. So
/// those are refused, saying why, rather than shortened or pre-hashed.
public enum PasswordRules {
    static let minCharacters = 10
    static let maxBytes = 72

    /// Why `password` cannot be used, in words for the page; `nil` when it can.
    public static func problem(_ password: String, again: String?) -> String? {
        if !fitsBcrypt(password) || password.count < minCharacters {
            return
                "Use at least \(minCharacters) characters and at most \(maxBytes) bytes (most letters are one byte, accented letters two, other scripts three), without NUL characters."
        }
        if let again, password != again { return "The two passwords differ. Type the same password twice." }
        return nil
    }

    /// Whether bcrypt would read `password` whole: only such a password can match a stored hash.
    static func fitsBcrypt(_ password: String) -> Bool {
        !password.unicodeScalars.contains("\u{0}") && password.utf8.count <= maxBytes
    }
}
