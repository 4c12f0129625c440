import Configuration
import Foundation
import Logging

extension AgentConfig {
    /// Every configuration key, in documentation order. This is the only list of keys: loading,
    /// the unknown-key check, error messages and the README table all come from it.
    public static let keys: [ConfigKeyInfo] = [
        .choice(
            "camera.source", \.camera.source,
            "Where frames come from: a V4L2 camera, a generated test pattern, or a video file."),
        .string(
            "camera.device", \.camera.device, type: "path",
            "V4L2 device node to capture from (source `v4l2`)."),
        .optionalString(
            "camera.file", \.camera.file, type: "path",
            "Video file played as the camera; required when source is `file`."),
        .int("camera.width", \.camera.width, 16...4096, even: true, "Capture width in pixels."),
        .int("camera.height", \.camera.height, 16...4096, even: true, "Capture height in pixels."),
        .int("camera.fps", \.camera.fps, 1...120, "Frames per second captured and recorded."),
        .choice(
            "camera.pixelFormat", \.camera.pixelFormat,
            "Pixel format asked of the camera; `auto` takes what the driver offers first."),
        .int(
            "camera.buffers", \.camera.buffers, 2...32,
            "V4L2 capture buffers; more absorb scheduling jitter at the cost of memory."),
        .int(
            "camera.pollTimeoutMs", \.camera.pollTimeoutMs, 50...60000,
            "How long one wait for a frame may take before it counts as a poll timeout, in ms."),
        .int(
            "camera.stallTimeouts", \.camera.stallTimeouts, 1...100,
            "This many poll timeouts in a row mean the camera has stalled and is reopened."),
        .range(
            "camera.reopenBackoffMs", \.camera.reopenBackoffMs, within: 1...600_000,
            "Wait before reopening a lost camera, in ms: starts at min, grows to at most max."),
        .choice(
            "camera.pace", \.camera.pace,
            "For `test-pattern` and `file`: `realtime` paces frames at fps, `fast` sends them as fast as they are taken."),
        .list(
            "encoder.preference", \.encoder.preference,
            "FFmpeg HEVC encoders to try, in order; the first that opens is used."),
        .choice(
            "encoder.rateControl", \.encoder.rateControl,
            "`crf` holds quality constant (encoder.crf); `bitrate` targets encoder.bitrateKbps."),
        .int(
            "encoder.crf", \.encoder.crf, 0...51,
            "Constant rate factor for `crf`; lower means better quality and bigger files."),
        .int(
            "encoder.bitrateKbps", \.encoder.bitrateKbps, 50...100_000,
            "Target bitrate for `bitrate`, in kbit/s."),
        .optionalInt(
            "encoder.maxrateKbps", \.encoder.maxrateKbps, 50...100_000,
            "VBV maximum rate for `bitrate`, in kbit/s; unset means encoder.bitrateKbps."),
        .optionalInt(
            "encoder.bufsizeKbps", \.encoder.bufsizeKbps, 50...200_000,
            "VBV buffer size for `bitrate`, in kbit; unset means 2 × encoder.bitrateKbps."),
        .int(
            "encoder.segmentSeconds", \.encoder.segmentSeconds, 1...60,
            "Length of each recorded segment file, in seconds."),
        .string(
            "output.dir", \.output.dir, type: "path",
            "Directory segments are written to; a relative path is taken from the working directory."),
        .choice("log.level", \.log.level, "Least severe log level that is printed."),
    ]

    static let keysByName = Dictionary(uniqueKeysWithValues: keys.map { ($0.name, $0) })

    /// Section name → its keys, in table order.
    static let sections: [(name: String, keys: [ConfigKeyInfo])] = keys.reduce(into: []) { sections, key in
        if sections.last?.name == key.section {
            sections[sections.count - 1].keys.append(key)
        } else {
            sections.append((key.section, [key]))
        }
    }

    /// Environment variables that set keys start with this, e.g. `DASHCAM_CAMERA_FPS`.
    public static let environmentPrefix = "DASHCAM"

    static func environmentProvider(_ environment: [String: String]) -> some ConfigProvider {
        EnvironmentVariablesProvider(environmentVariables: environment)
            .prefixKeys(with: ConfigKey(environmentPrefix))
    }

    /// Asks the provider itself how it spells a key, so the docs and error messages can't
    /// disagree with how swift-configuration encodes camelCase.
    static func environmentVariable(for name: String) -> String {
        let lookup = try? environmentProvider([:]).value(forKey: AbsoluteConfigKey(ConfigKey(name)), type: .string)
        return lookup?.encodedKey ?? name
    }
}

/// One configuration key: its name, how it is documented, and how its value is checked.
public struct ConfigKeyInfo: Sendable {
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
    /// The environment variable that sets this key, e.g. `DASHCAM_CAMERA_POLL_TIMEOUT_MS`.
    public let environmentVariable: String

    /// Completes "expected …" in error messages.
    let expected: String
    let shape: Shape
    /// Stores an accepted value; returns false when the value isn't allowed.
    let assign: @Sendable (Value, inout AgentConfig) -> Bool

    var section: String { String(name.prefix { $0 != "." }) }
    var leaf: String { String(name.drop { $0 != "." }.dropFirst()) }

    /// What providers are asked for; swift-configuration does the conversion to it.
    enum Shape: Sendable {
        case int, string, intList, stringList
    }

    enum Value: Sendable {
        case int(Int), string(String), ints([Int]), strings([String])
    }

    init(
        _ name: String, type: String, allowed: String, defaultValue: String?, summary: String,
        expected: String, shape: Shape, assign: @escaping @Sendable (Value, inout AgentConfig) -> Bool
    ) {
        self.name = name
        self.type = type
        self.allowed = allowed
        self.defaultValue = defaultValue
        self.summary = summary
        self.environmentVariable = AgentConfig.environmentVariable(for: name)
        self.expected = expected
        self.shape = shape
        self.assign = assign
    }
}

// MARK: - Kinds of key

extension ConfigKeyInfo {
    typealias Path<T> = any WritableKeyPath<AgentConfig, T> & Sendable

    private static let defaults = AgentConfig()

    static func int(
        _ name: String, _ path: Path<Int>, _ range: ClosedRange<Int>, even: Bool = false, _ summary: String
    ) -> Self {
        Self(
            name, type: "int", allowed: even ? "even, \(range)" : "\(range)",
            defaultValue: "\(defaults[keyPath: path])", summary: summary,
            expected: even ? "an even integer \(range)" : "an integer \(range)", shape: .int
        ) { value, config in
            guard case .int(let n) = value, range.contains(n), !even || n.isMultiple(of: 2) else { return false }
            config[keyPath: path] = n
            return true
        }
    }

    static func optionalInt(_ name: String, _ path: Path<Int?>, _ range: ClosedRange<Int>, _ summary: String) -> Self {
        Self(
            name, type: "int", allowed: "\(range)", defaultValue: defaults[keyPath: path].map { "\($0)" },
            summary: summary, expected: "an integer \(range)", shape: .int
        ) { value, config in
            guard case .int(let n) = value, range.contains(n) else { return false }
            config[keyPath: path] = n
            return true
        }
    }

    static func string(_ name: String, _ path: Path<String>, type: String, _ summary: String) -> Self {
        Self(
            name, type: type, allowed: "non-empty", defaultValue: defaults[keyPath: path], summary: summary,
            expected: "a non-empty \(type)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, !text.isEmpty else { return false }
            config[keyPath: path] = text
            return true
        }
    }

    static func optionalString(_ name: String, _ path: Path<String?>, type: String, _ summary: String) -> Self {
        Self(
            name, type: type, allowed: "non-empty", defaultValue: defaults[keyPath: path], summary: summary,
            expected: "a non-empty \(type)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, !text.isEmpty else { return false }
            config[keyPath: path] = text
            return true
        }
    }

    static func choice<Choice: RawRepresentable<String> & CaseIterable & Sendable>(
        _ name: String, _ path: Path<Choice>, _ summary: String
    ) -> Self {
        let names = Choice.allCases.map(\.rawValue).joined(separator: ", ")
        return Self(
            name, type: "string", allowed: names, defaultValue: defaults[keyPath: path].rawValue,
            summary: summary, expected: "one of \(names)", shape: .string
        ) { value, config in
            guard case .string(let text) = value, let choice = Choice(rawValue: text) else { return false }
            config[keyPath: path] = choice
            return true
        }
    }

    /// A `[min, max]` pair, which is how a backoff reads naturally in YAML.
    static func range(
        _ name: String, _ path: Path<ClosedRange<Int>>, within bounds: ClosedRange<Int>, _ summary: String
    ) -> Self {
        let fallback = defaults[keyPath: path]
        return Self(
            name, type: "[int, int]", allowed: "[min, max], each \(bounds), min ≤ max",
            defaultValue: "[\(fallback.lowerBound), \(fallback.upperBound)]", summary: summary,
            expected: "two integers [min, max] with min ≤ max, each \(bounds)", shape: .intList
        ) { value, config in
            guard case .ints(let pair) = value, pair.count == 2, pair.allSatisfy(bounds.contains), pair[0] <= pair[1]
            else { return false }
            config[keyPath: path] = pair[0]...pair[1]
            return true
        }
    }

    static func list(_ name: String, _ path: Path<[String]>, _ summary: String) -> Self {
        Self(
            name, type: "[string]", allowed: "non-empty list",
            defaultValue: "[\(defaults[keyPath: path].joined(separator: ", "))]", summary: summary,
            expected: "a non-empty list of non-empty strings", shape: .stringList
        ) { value, config in
            guard case .strings(let items) = value, !items.isEmpty, !items.contains(where: \.isEmpty) else {
                return false
            }
            config[keyPath: path] = items
            return true
        }
    }
}

// MARK: - Reading

extension ConfigKeyInfo {
    /// Nil when no provider has the key; throws when one has it with the wrong type.
    func fetch(from reader: ConfigReader) async throws -> Value? {
        let key = ConfigKey(name)
        return switch shape {
        case .int: try await reader.fetchInt(forKey: key).map(Value.int)
        case .string: try await reader.fetchString(forKey: key).map(Value.string)
        case .intList: try await reader.fetchIntArray(forKey: key).map(Value.ints)
        case .stringList: try await reader.fetchStringArray(forKey: key).map(Value.strings)
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
        case .string:
            return .string(text)
        case .intList:
            let ints = items.compactMap { Int($0) }
            return ints.count == items.count ? .intArray(ints) : nil
        case .stringList:
            return .stringArray(items)
        }
    }

    /// The known key a mistyped one most likely meant: one within two edits (ignoring case),
    /// else the same key name under another section.
    static func closest(to unknown: String) -> String? {
        let candidates = AgentConfig.keys.map(\.name) + AgentConfig.sections.map(\.name)
        let lowered = unknown.lowercased()
        let nearest = candidates.map { ($0, editDistance($0.lowercased(), lowered)) }.min { $0.1 < $1.1 }
        if let nearest, nearest.1 <= 2 {
            return nearest.0
        }
        let leaf = lowered.split(separator: ".").last.map(String.init) ?? lowered
        return AgentConfig.keys.first { $0.leaf.lowercased() == leaf }?.name
    }
}

private func editDistance(_ a: String, _ b: String) -> Int {
    let b = Array(b)
    var row = Array(0...b.count)
    for (i, charA) in a.enumerated() {
        var diagonal = row[0]
        row[0] = i + 1
        for (j, charB) in b.enumerated() {
            let above = row[j + 1]
            row[j + 1] = min(above + 1, row[j] + 1, diagonal + (charA == charB ? 0 : 1))
            diagonal = above
        }
    }
    return row[b.count]
}

// MARK: - Documentation

extension ConfigKeyInfo {
    /// The key table of device-config/README.md; a test keeps the README equal to it.
    public static func markdownTable(_ keys: [ConfigKeyInfo] = AgentConfig.keys) -> String {
        let rows = keys.map { key in
            let defaultValue = key.defaultValue.map { "`\($0)`" } ?? "unset"
            return "| `\(key.name)` | \(key.type) | \(defaultValue) | \(key.allowed) | `\(key.environmentVariable)` | \(key.summary) |"
        }
        return ([
            "| Key | Type | Default | Allowed | Environment variable | What it does |",
            "| --- | --- | --- | --- | --- | --- |",
        ] + rows).joined(separator: "\n")
    }
}
