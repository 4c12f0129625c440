// Shared configuration machinery (YAML file, environment, command line) for the agent and the server.
import Configuration
// Public only for ProcessInfo in `load`'s default argument.
public import Foundation

/// A program's root configuration type, read by `load(file:environment:overrides:)`.
///
/// `init()` is the built-in defaults, written only there: `keys` and the docs table quote them
/// from an instance, so they can't disagree.
public protocol LoadableConfig: Sendable, Equatable {
    /// The built-in defaults.
    init()
    /// Every configuration key, in documentation order, sections together. This is the only list of
    /// keys: loading, the unknown-key check, error messages and the docs table all come from it.
    static var keys: [ConfigKeyInfo<Self>] { get }
    /// Environment variables that set keys start with this and `_`, e.g. `DASHCAM` for `DASHCAM_CAMERA_FPS`.
    static var environmentPrefix: String { get }
    /// Cross-key checks after all keys are read (e.g. camera.file required when source is file);
    /// throw `ConfigError.missingKey(_:reason:)` or another `ConfigError`.
    func validate() throws(ConfigError)
}

extension LoadableConfig {
    /// Reads the configuration: command-line overrides win over environment variables, which
    /// win over the YAML file, which wins over the built-in defaults (`Self()`); then `validate()`s it.
    ///
    /// - Parameters:
    ///   - file: Path of a YAML config file, or nil for none. Sections are nested mappings
    ///     (`camera:` / `  fps: 10`); a key not in `keys` is an error.
    ///   - environment: Variables named `environmentPrefix` + `_` + the key in upper snake case, e.g.
    ///     `DASHCAM_CAMERA_POLL_TIMEOUT_MS` for `camera.pollTimeoutMs`.
    ///   - overrides: Dotted key → value text, e.g. `["camera.fps": "15"]`; lists are comma-separated.
    public static func load(
        file: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        overrides: [String: String] = [:]
    ) async throws(ConfigError) -> Self {
        let table = KeyTable<Self>()
        var fileContents: ConfigFileContents?
        if let file {
            fileContents = try ConfigFileContents(path: file, table: table)
        }
        var providers: [any ConfigProvider] = [
            try commandLineProvider(overrides, table: table),
            ConfigEnvironment.provider(environment, prefix: environmentPrefix)
        ]
        if let fileContents, !fileContents.isEmpty {
            providers.append(try await fileProvider(path: fileContents.path))
        }
        let reader = ConfigReader(providers: providers)
        let inputs = LoadInputs(overrides: overrides, environment: environment, file: fileContents)

        var config = Self()
        for key in table.keys {
            let value: ConfigKeyValue?
            do {
                value = try await key.fetch(from: reader)
            } catch {
                throw inputs.rejection(of: key)
            }
            if let value, !key.assign(value, &config) {
                throw inputs.rejection(of: key)
            }
        }
        try config.validate()
        return config
    }

    /// The dotted keys a YAML config file sets, after the checks `load` makes of it (unknown keys,
    /// misplaced sections, syntax): for a command that rewrites the file and keeps what it sets.
    public static func keys(setIn file: String) throws(ConfigError) -> Set<String> {
        Set(try ConfigFileContents(path: file, table: KeyTable<Self>()).entries.keys)
    }

    /// The key table for the docs (e.g. device-config/README.md), one row per key in `keys`.
    public static func markdownTable() -> String {
        ConfigKeyInfo<Self>.markdownTable(keys)
    }

    private static func commandLineProvider(
        _ overrides: [String: String], table: KeyTable<Self>
    ) throws(ConfigError) -> InMemoryProvider {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        // Sorted so that with several bad overrides the same one is reported every time.
        for (name, text) in overrides.sorted(by: { $0.key < $1.key }) {
            guard let key = table.byName[name] else {
                throw .unknownKey(name, at: .commandLine, in: table)
            }
            guard let content = key.content(fromText: text) else {
                throw .invalidValue(name, value: text, expected: key.expected, at: .commandLine)
            }
            values[AbsoluteConfigKey(ConfigKey(name))] = ConfigValue(content, isSecret: false)
        }
        return InMemoryProvider(name: "command line", values: values)
    }

    private static func fileProvider(path: String) async throws(ConfigError) -> FileProvider<YAMLSnapshot> {
        do {
            // Handing the path over as config spares a direct dependency on swift-system's FilePath.
            let location = InMemoryProvider(values: ["filePath": ConfigValue(.string(path), isSecret: false)])
            return try await FileProvider<YAMLSnapshot>(config: ConfigReader(provider: location))
        } catch {
            // ConfigFileContents has already read and checked this file, so only a race gets here.
            throw .unreadable(path, reason: "\(error)")
        }
    }
}

/// The raw inputs, kept to tell the user which value was rejected and where it was written.
private struct LoadInputs {
    let overrides: [String: String]
    let environment: [String: String]
    let file: ConfigFileContents?

    func rejection<Root>(of key: ConfigKeyInfo<Root>) -> ConfigError {
        let origin = origin(of: key)
        return .invalidValue(key.name, value: origin?.text ?? "?", expected: key.expected, at: origin?.place)
    }

    /// Same order as the providers handed to ConfigReader.
    private func origin<Root>(of key: ConfigKeyInfo<Root>) -> (text: String, place: ConfigError.Place)? {
        if let text = overrides[key.name] {
            return (text, .commandLine)
        }
        if let text = environment[key.environmentVariable] {
            return (text, .environment(variable: key.environmentVariable))
        }
        if let file, let entry = file.entries[key.name] {
            return (entry.text, .file(path: file.path, line: entry.line))
        }
        return nil
    }
}
