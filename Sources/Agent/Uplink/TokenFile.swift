import Foundation

public struct TokenFileError: Error, CustomStringConvertible {
    public let description: String
}

/// Reads the bearer token; refuses a file others could read. The token itself is never logged.
public enum TokenFile {
    public static func read(_ path: String) throws(TokenFileError) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw TokenFileError(description: "uplink.tokenFile \(path): \(String(cString: strerror(errno)))")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw TokenFileError(description: "uplink.tokenFile \(path) is readable by group or others (mode \(String(mode, radix: 8))); run chmod 600 on it")
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
public enum TokenSource: Sendable, Equatable, ExpressibleByStringLiteral {
    /// A token given directly (tests, tools).
    case literal(String)
    /// `uplink.tokenFile`.
    case file(String)

    public init(stringLiteral value: String) { self = .literal(value) }

    public func read() throws(TokenFileError) -> String {
        switch self {
        case .literal(let token): token
        case .file(let path): try TokenFile.read(path)
        }
    }
}
