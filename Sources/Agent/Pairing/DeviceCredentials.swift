import FileSupport
public import Foundation
public import Logging
import Synchronization

/// A paired car's credentials (`uplink.credentialsFile`, mode 0600, written whole or not at all):
/// the device id the server gave, whose account it joined, the refresh token, and the current
/// access token with when it runs out. The uplink asks it for an access token at each connection;
/// one about to run out is renewed first with the refresh token, and the file is rewritten with
/// the rotated refresh token before the new access token is used, so a power cut never leaves
/// the car with only a spent token.
public final class DeviceCredentials: Sendable {
    public struct Stored: Codable, Sendable, Equatable {
        public var deviceId: String
        public var ownerName: String
        public var refreshToken: String
        public var accessToken: String
        /// Seconds since the Unix epoch.
        public var accessExpiresAt: Int64
    }

    public let path: String
    private let state: Mutex<Stored?>
    /// Renews the access token (the server's token endpoint), or says why not.
    private let renew: @Sendable (String) async -> RenewAnswer
    private let logger: Logger
    private let forgotten: AsyncStream<Void>.Continuation
    /// Yields each time the credentials are forgotten (the pairing service starts again).
    public let forgets: AsyncStream<Void>

    public enum RenewAnswer: Sendable, Equatable {
        case renewed(DevicePairing.Credentials)
        /// The server refused the refresh token (revoked, unpaired, reused): pair again.
        case refused
        /// No answer; try again at the next connection.
        case failed(String)
    }

    /// The credentials in `path`, if there are any (a file that cannot be read or parsed is none:
    /// the car pairs again).
    public init(path: String, logger: Logger, renew: @escaping @Sendable (String) async -> RenewAnswer) {
        self.path = path
        self.renew = renew
        self.logger = logger
        (forgets, forgotten) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        var stored: Stored?
        if let data = FileManager.default.contents(atPath: path) {
            stored = try? JSONDecoder().decode(Stored.self, from: data)
            if stored == nil { logger.warning("\(path) is not a credentials file; the car pairs again") }
        }
        state = Mutex(stored)
    }

    public var isPaired: Bool { state.withLock { $0 != nil } }
    public var current: Stored? { state.withLock { $0 } }

    /// Stores what pairing (or a renewal) gave.
    public func store(_ credentials: DevicePairing.Credentials, now: Int64 = Int64(Date().timeIntervalSince1970)) throws {
        let stored = Stored(
            deviceId: credentials.deviceId, ownerName: credentials.ownerName, refreshToken: credentials.refreshToken,
            accessToken: credentials.accessToken,
            accessExpiresAt: now + Int64(min(max(credentials.expiresIn, 0), 86_400)))
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let bytes = Array(try encoder.encode(stored))
        try DurableFileWriter.write(bytes, to: path, temporary: path + ".tmp", mode: 0o600, exactMode: true)
        state.withLock { $0 = stored }
    }

    /// Forgets the pairing (the server refused it): the file goes, and the car pairs again.
    public func forget() {
        state.withLock { $0 = nil }
        unlink(path)
        DurableFileWriter.syncFolder(containing: path)
        forgotten.yield()
    }

    /// After the server refused the access token (an unpaired car is closed with 4401 and
    /// refused at the upgrade): asks the server with the refresh token. Renewed: the new
    /// credentials are stored and `true` returned; refused: the credentials are forgotten (the car
    /// pairs again).
    public func checkAfterRefusal() async -> Bool {
        guard let stored = current else { return false }
        switch await renew(stored.refreshToken) {
        case .renewed(let credentials):
            do { try store(credentials) } catch { return false }
            return true
        case .refused:
            logger.warning("the server refused this car's credentials (unpaired?): it pairs again")
            forget()
            return false
        case .failed:
            return false
        }
    }

    /// An access token good for at least another minute, renewed first if needed.
    public func accessToken(now: Int64 = Int64(Date().timeIntervalSince1970)) async throws(TokenFileError) -> String {
        guard let stored = current else { throw TokenFileError(description: "not paired yet") }
        if stored.accessExpiresAt - now > 60 { return stored.accessToken }
        switch await renew(stored.refreshToken) {
        case .renewed(let credentials):
            do { try store(credentials, now: now) } catch {
                throw TokenFileError(description: "cannot keep the renewed credentials in \(path): \(error)")
            }
            return credentials.accessToken
        case .refused:
            logger.warning("the server refused this car's credentials: it pairs again")
            forget()
            throw TokenFileError(description: "the server refused the credentials; pairing again")
        case .failed(let reason):
            throw TokenFileError(description: "cannot renew the access token: \(reason)")
        }
    }
}
