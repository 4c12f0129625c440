import Configuration
import Foundation

/// One configuration key of `Root`: its name, how it is documented, and how its value is checked.
///
/// A program lists its keys once, in `LoadableConfig.keys`, built with `.int`, `.string`, `.choice`,
/// and so on; loading, the unknown-key check, error messages and the docs table all come from that list.
public struct ConfigKeyInfo<Root: LoadableConfig>: Sendable {
    /// Dotted name, e.g. `camera.pollTimeoutMs`: nested keys in YAML, this string on the command line.
    public let name: String
    /// As documented: `int`, `string`, `path`, `[int, int]` or `[string]`.
    public let type: String
    /// The accepted values, for the docs.
    public let allowed: String
    /// The built-in default as YAML would spell it; nil when the key is unset by default.
    public let defaultValue: String?
    /// What the key does.
    public let summary: String
    /// The key's value in a configuration, spelled like `defaultValue`; nil when unset.
    public let text: @Sendable (Root) -> String?
    /// The environment variable that sets this key: `Root.environmentPrefix`, `_`, then the key in
    /// upper snake case, e.g. `DASHCAM_CAMERA_POLL_TIMEOUT_MS`.
    public let environmentVariable: String

    /// Completes "expected …" in error messages.
    let expected: String
    let shape: ConfigKeyShape
    let copyValue: @Sendable (inout Root, Root) -> Void
    /// Stores an accepted value; returns false when the value isn't allowed.
    let assign: @Sendable (ConfigKeyValue, inout Root) -> Bool

    var section: String { String(name.prefix { $0 != "." }) }
    var leaf: String { String(name.drop { $0 != "." }.dropFirst()) }

    init<Value>(
        _ name: String, _ path: Path<Value>, type: String, allowed: String, text: @escaping @Sendable (Root) -> String?, summary: String,
        expected: String, shape: ConfigKeyShape, assign: @escaping @Sendable (ConfigKeyValue, inout Root) -> Bool
    ) {
        self.name = name
        self.type = type
        self.allowed = allowed
        self.text = text
        self.copyValue = { target, source in target[keyPath: path] = source[keyPath: path] }
        self.defaultValue = text(Root())
        self.summary = summary
        self.environmentVariable = ConfigEnvironment.variable(for: name, prefix: Root.environmentPrefix)
        self.expected = expected
        self.shape = shape
        self.assign = assign
    }
}

/// What providers are asked for; swift-configuration does the conversion to it.
enum ConfigKeyShape: Sendable {
    case int, bool, string, intList, stringList
}

enum ConfigKeyValue: Sendable {
    case int(Int), bool(Bool), string(String), ints([Int]), strings([String])
}

// MARK: - Kinds of key

extension ConfigKeyInfo {
    /// Where a key's value is stored in `Root`, e.g. `\.camera.fps`.
    public typealias Path<T> = any WritableKeyPath<Root, T> & Sendable

    /// An integer in `range`; `even` also refuses odd numbers.
    public static func int(
        _ name: String, _ path: Path<Int>, _ range: ClosedRange<Int>, even: Bool = false, _ summary: String
    ) -> Self {
        Self(
            name, path, type: "int", allowed: even ? "even, \(range)" : "\(range)",
            text: { "\($0[keyPath: path])" }, summary: summary,
            expected: even ? "an even integer \(range)" : "an integer \(range)", shape: .int
        ) { value, config in
            guard case .int(let n) = value, range.contains(n), !even || n.isMultiple(of: 2) else { return false }
            config[keyPath: path] = n
            return true
        }
    }

    /// An integer in `range`, or unset (nil); `even` also refuses odd numbers.
    public static func optionalInt(
        _ name: String, _ path: Path<Int?>, _ range: ClosedRange<Int>, even: Bool = false, _ summary: String
    ) -> Self {
        Self(
            name, path, type: "int", allowed: even ? "even, \(range)" : "\(range)", text: { $0[keyPath: path].map { "\($0)" } },
            summary: summary, expected: even ? "an even integer \(range)" : "an integer \(range)", shape: .int
        ) { value, config in
            guard case .int(let n) = value, range.contains(n), !even || n.isMultiple(of: 2) else { return false }
            config[keyPath: path] = n
            return true
        }
    }

    /// `true` or `false`.
    public static func bool(_ name: String, _ path: Path<Bool>, _ summary: String) -> Self {
        Self(
            name, path, type: "bool", allowed: "true, false", text: { "\($0[keyPath: path])" }, summary: summary,
            expected: "true or false", shape: .bool
        ) { value, config in
            guard case .bool(let flag) = value else { return false }
            config[keyPath: path] = flag
            return true
        }
    }

    /// Non-empty text; `type` is how the docs and errors call it, e.g. `string` or `path`.
    public static func string(_ name: String, _ path: Path<String>, type: String, _ summary: String) -> Self {
        Self(
            name, path, type: type, allowed: "non-empty", text: { $0[keyPath: path] }, summary: summary,
            expected: "a non-empty \(type)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, !text.isEmpty else { return false }
            config[keyPath: path] = text
            return true
        }
    }

    /// Non-empty text, or unset (nil).
    public static func optionalString(_ name: String, _ path: Path<String?>, type: String, _ summary: String) -> Self {
        Self(
            name, path, type: type, allowed: "non-empty", text: { $0[keyPath: path] }, summary: summary,
            expected: "a non-empty \(type)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, !text.isEmpty else { return false }
            config[keyPath: path] = text
            return true
        }
    }

    /// One of an enum's raw values, listed in declaration order.
    public static func choice<Choice: RawRepresentable<String> & CaseIterable & Sendable>(
        _ name: String, _ path: Path<Choice>, _ summary: String
    ) -> Self {
        let names = Choice.allCases.map(\.rawValue).joined(separator: ", ")
        return Self(
            name, path, type: "string", allowed: names, text: { $0[keyPath: path].rawValue },
            summary: summary, expected: "one of \(names)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, let choice = Choice(rawValue: text) else { return false }
            config[keyPath: path] = choice
            return true
        }
    }

    /// A `[min, max]` pair, which is how a backoff reads naturally in YAML.
    public static func range(
        _ name: String, _ path: Path<ClosedRange<Int>>, within bounds: ClosedRange<Int>, _ summary: String
    ) -> Self {
        Self(
            name, path, type: "[int, int]", allowed: "[min, max], each \(bounds), min ≤ max",
            text: { "[\($0[keyPath: path].lowerBound), \($0[keyPath: path].upperBound)]" }, summary: summary,
            expected: "two integers [min, max] with min ≤ max, each \(bounds)", shape: .intList
        ) { value, config in
            guard case .ints(let pair) = value, pair.count == 2, pair.allSatisfy(bounds.contains), pair[0] <= pair[1]
            else { return false }
            config[keyPath: path] = pair[0]...pair[1]
            return true
        }
    }

    /// A list of `count` integers, each in `each`.
    public static func intList(
        _ name: String, _ path: Path<[Int]>, each: ClosedRange<Int>, count: ClosedRange<Int>, _ summary: String
    ) -> Self {
        Self(
            name, path, type: "[int]", allowed: "\(count.lowerBound)–\(count.upperBound) items, each \(each)",
            text: { "[\($0[keyPath: path].map(String.init).joined(separator: ", "))]" }, summary: summary,
            expected: "a list of \(count.lowerBound) to \(count.upperBound) integers, each \(each)", shape: .intList
        ) { value, config in
            guard case .ints(let items) = value, count.contains(items.count), items.allSatisfy(each.contains) else {
                return false
            }
            config[keyPath: path] = items
            return true
        }
    }

    /// A non-empty list of non-empty strings, or unset (nil).
    public static func optionalList(_ name: String, _ path: Path<[String]?>, _ summary: String) -> Self {
        Self(
            name, path, type: "[string]", allowed: "non-empty list",
            text: { $0[keyPath: path].map { "[\($0.joined(separator: ", "))]" } }, summary: summary,
            expected: "a non-empty list of non-empty strings", shape: .stringList
        ) { value, config in
            guard let items = nonEmptyStrings(value) else { return false }
            config[keyPath: path] = items
            return true
        }
    }

    /// The items of a non-empty list of non-empty strings; nil for anything else.
    private static func nonEmptyStrings(_ value: ConfigKeyValue) -> [String]? {
        guard case .strings(let items) = value, !items.isEmpty, !items.contains(where: \.isEmpty) else { return nil }
        return items
    }

    /// A non-empty list of non-empty strings.
    public static func list(_ name: String, _ path: Path<[String]>, _ summary: String) -> Self {
        Self(
            name, path, type: "[string]", allowed: "non-empty list",
            text: { "[\($0[keyPath: path].joined(separator: ", "))]" }, summary: summary,
            expected: "a non-empty list of non-empty strings", shape: .stringList
        ) { value, config in
            guard let items = nonEmptyStrings(value) else { return false }
            config[keyPath: path] = items
            return true
        }
    }
}

// MARK: - Comparing

extension ConfigKeyInfo {
    /// The keys whose values differ between two configurations, in documentation order.
    public static func changes(in keys: [Self], from old: Root, to new: Root) -> [Self] {
        keys.filter { $0.text(old) != $0.text(new) }
    }

    /// Sets this key in `target` to its value in `source`.
    public func copy(from source: Root, to target: inout Root) {
        copyValue(&target, source)
    }
}

// MARK: - Writing

extension ConfigKeyInfo {
    /// The key's value in `config` written as YAML that reads back as the same value; nil when
    /// unset. Text YAML would take for a number, a boolean or null, or that holds YAML's own
    /// characters, is quoted.
    public func yaml(in config: Root) -> String? {
        guard let text = text(config) else { return nil }
        switch shape {
        case .string:
            return Self.yamlString(text)
        case .stringList:
            let items = text.dropFirst().dropLast().components(separatedBy: ", ")
            return "[\(items.map(Self.yamlString).joined(separator: ", "))]"
        case .int, .bool, .intList:
            return text
        }
    }

    static func yamlString(_ text: String) -> String {
        let special: Set<String> = ["true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"]
        let plain =
            text.first.map { $0.isASCII && ($0.isLetter || $0 == "/") } == true
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "_./+-:".contains($0)) }
            && !text.contains(": ") && !text.hasSuffix(":")
            && !special.contains(text.lowercased())
        if plain { return text }
        return "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}

// MARK: - Reading

extension ConfigKeyInfo {
    /// Nil when no provider has the key; throws when one has it with the wrong type.
    func fetch(from reader: ConfigReader) async throws -> ConfigKeyValue? {
        let key = ConfigKey(name)
        return switch shape {
        case .int: try await reader.fetchInt(forKey: key).map(ConfigKeyValue.int)
        case .bool: try await reader.fetchBool(forKey: key).map(ConfigKeyValue.bool)
        case .string: try await reader.fetchString(forKey: key).map(ConfigKeyValue.string)
        case .intList: try await reader.fetchIntArray(forKey: key).map(ConfigKeyValue.ints)
        case .stringList: try await reader.fetchStringArray(forKey: key).map(ConfigKeyValue.strings)
        }
    }

    /// Command-line values arrive as text and `InMemoryProvider` doesn't convert, so this types
    /// them the way the environment provider types environment variables: lists are comma-separated.
    func content(fromText text: String) -> ConfigContent? {
        let items = text.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }
        switch shape {
        case .int:
            return Int(text.trimmingCharacters(in: .whitespaces)).map(ConfigContent.int)
        case .bool:
            return Bool(text.trimmingCharacters(in: .whitespaces).lowercased()).map(ConfigContent.bool)
        case .string:
            return .string(text)
        case .intList:
            let ints = items.compactMap { Int($0) }
            return ints.count == items.count ? .intArray(ints) : nil
        case .stringList:
            return .stringArray(items)
        }
    }
}

// MARK: - Documentation

extension ConfigKeyInfo {
    /// A Markdown table of `keys`: name, type, default, allowed values, environment variable, summary.
    public static func markdownTable(_ keys: [Self]) -> String {
        let rows = keys.map { key in
            let defaultValue = key.defaultValue.map { "`\($0)`" } ?? "unset"
            return "| `\(key.name)` | \(key.type) | \(defaultValue) | \(key.allowed) | `\(key.environmentVariable)` | \(key.summary) |"
        }
        return
            ([
                "| Key | Type | Default | Allowed | Environment variable | What it does |",
                "| --- | --- | --- | --- | --- | --- |"
            ] + rows).joined(separator: "\n")
    }
}
