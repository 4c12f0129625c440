import Foundation

public struct TokenFileError: Error, CustomStringConvertible {
    public let description: String
}

/// Reads the bearer token; refuses a file others could read. The token itself is never logged.
public enum TokenFile {
    /// Whether `path` names a file at all (readable or not): a broken token file is reported, not
    /// passed over for pairing.
    public static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    public static func read(_ path: String) throws(TokenFileError) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw TokenFileError(description: "uplink.tokenFile \(path): \(String(cString: strerror(errno)))")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw TokenFileError(
                description: "uplink.tokenFile \(path) is readable by group or others (mode \(String(mode, radix: 8))); run chmod 600 on it"
            )
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TokenFileError(description: "uplink.tokenFile \(path): cannot be read")
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty else { throw TokenFileError(description: "uplink.tokenFile \(path) is empty") }
        return token
    }
}

/// Where the uplink takes its bearer token from. The file is read again at every connection
/// attempt: a token put in place (or fixed) while the agent records is used from the next attempt,
/// without a restart.
public enum TokenSource: Sendable, ExpressibleByStringLiteral {
    /// A token given directly (tests, tools).
    case literal(String)
    /// `uplink.tokenFile`.
    case file(String)
    /// `uplink.tokenFile` if there is one, else the access token of a paired car
    /// (`uplink.credentialsFile`), renewed as it runs out.
    case fileOrPaired(String, DeviceCredentials)

    public init(stringLiteral value: String) { self = .literal(value) }

    public func read() async throws(TokenFileError) -> String {
        switch self {
        case .literal(let token): return token
        case .file(let path): return try TokenFile.read(path)
        case .fileOrPaired(let path, let credentials):
            if TokenFile.exists(path) || !credentials.isPaired {
                do { return try TokenFile.read(path) } catch  where !TokenFile.exists(path) {
                    throw TokenFileError(description: "\(error.description); not paired either")
                }
            }
            return try await credentials.accessToken()
        }
    }
}
