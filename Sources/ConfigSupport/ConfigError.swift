/// A configuration problem the user has to fix before the program can start.
///
/// `description` is one sentence naming the key or file, what was wrong and what is accepted.
/// The problems are a private enum so that new ones don't break callers' `switch`es.
public struct ConfigError: Error, CustomStringConvertible, Sendable {
    /// A command-line option that isn't a config key, such as `--segments`, given a value it can't take.
    /// `expected` completes "expected …", e.g. "a whole number of segments, 1 or more".
    public static func invalidOption(_ option: String, _ value: String, _ expected: String) -> Self {
        invalidValue(option, value: value, expected: expected, at: nil)
    }

    /// A key that has to be set because of other keys' values; for `LoadableConfig.validate()`.
    /// `reason` completes "not set, but …", e.g. "camera.source is 'file'; set it to the video file to play".
    public static func missingKey(_ key: String, reason: String) -> Self {
        Self(.missingKey(key, reason: reason))
    }

    /// The config key (or command-line option) the problem is about, when it is about one.
    public var key: String? {
        switch problem {
        case .unknownKey(let key, _, _, _), .invalidValue(let key, _, _, _), .missingKey(let key, _):
            key
        case .notAMapping(let key, _, _):
            key.isEmpty ? nil : key
        case .fileNotFound, .unreadable, .syntax:
            nil
        }
    }

    public var description: String {
        switch problem {
        case .unknownKey(let key, let place, let suggestion, let validKeys):
            if let suggestion {
                "\(place): unknown key '\(key)' (did you mean '\(suggestion)'?)"
            } else {
                "\(place): unknown key '\(key)' (valid keys here: \(validKeys.joined(separator: ", ")))"
            }
        case .notAMapping(let key, let place, let validKeys):
            "\(place): \(key.isEmpty ? "the top level" : "'\(key)'") must be a mapping of keys such as "
                + validKeys.joined(separator: ", ")
        case .invalidValue(let key, let value, let expected, let place):
            "\(key): '\(value)' is not allowed; expected \(expected)" + (place.map { " (given \($0.preposition) \($0))" } ?? "")
        case .missingKey(let key, let reason):
            "\(key): not set, but \(reason)"
        case .fileNotFound(let path):
            "\(path): config file not found"
        case .unreadable(let path, let reason):
            "\(path): cannot read config file: \(reason)"
        case .syntax(let path, let line, let message):
            "\(path)\(line.map { ":\($0)" } ?? ""): YAML syntax error: \(message)"
        }
    }

    /// Where a value or key was written.
    enum Place: Sendable, CustomStringConvertible {
        case commandLine
        case environment(variable: String)
        case file(path: String, line: Int?)

        var description: String {
            switch self {
            case .commandLine: "command line"
            case .environment(let variable): "environment variable \(variable)"
            case .file(let path, let line): line.map { "\(path):\($0)" } ?? path
            }
        }

        var preposition: String {
            switch self {
            case .commandLine: "on the"
            case .environment: "by"
            case .file: "at"
            }
        }
    }

    private enum Problem: Sendable {
        case unknownKey(String, Place, suggestion: String?, validKeys: [String])
        case notAMapping(String, Place, validKeys: [String])
        case invalidValue(String, value: String, expected: String, Place?)
        case missingKey(String, reason: String)
        case fileNotFound(String)
        case unreadable(String, reason: String)
        case syntax(String, line: Int?, message: String)
    }

    private let problem: Problem

    private init(_ problem: Problem) {
        self.problem = problem
    }

    /// Suggests the closest known key, or else lists the keys of the section the user was in.
    static func unknownKey<Root>(_ key: String, at place: Place, in table: KeyTable<Root>) -> Self {
        let section = String(key.prefix { $0 != "." })
        // The keys of the group it was in (`sensors.accel.`), else of its section.
        let group = key.lastIndex(of: ".").map { String(key[..<$0]) + "." } ?? ""
        let all = table.sections.first { $0.name == section && key.contains(".") }?.keys.map(\.name)
        let inGroup = all?.filter { $0.hasPrefix(group) }
        let sectionKeys = inGroup?.isEmpty == false ? inGroup : all
        return Self(
            .unknownKey(
                key, place, suggestion: table.closest(to: key),
                validKeys: sectionKeys ?? table.sections.map(\.name)))
    }

    static func notAMapping(_ key: String, at place: Place, validKeys: [String]) -> Self {
        Self(.notAMapping(key, place, validKeys: validKeys))
    }

    static func invalidValue(_ key: String, value: String, expected: String, at place: Place?) -> Self {
        Self(.invalidValue(key, value: value, expected: expected, place))
    }

    static func fileNotFound(_ path: String) -> Self {
        Self(.fileNotFound(path))
    }

    static func unreadable(_ path: String, reason: String) -> Self {
        Self(.unreadable(path, reason: reason))
    }

    static func syntax(_ path: String, line: Int?, message: String) -> Self {
        Self(.syntax(path, line: line, message: message))
    }
}
