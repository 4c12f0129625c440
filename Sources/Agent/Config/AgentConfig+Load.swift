import Configuration
// Public only for ProcessInfo in `load`'s default argument.
public import Foundation

extension AgentConfig {
    /// Reads the configuration: command-line overrides win over environment variables, which
    /// win over the YAML file, which wins over the built-in defaults (`AgentConfig()`).
    ///
    /// - Parameters:
    ///   - file: Path of a YAML config file, or nil for none.
    ///   - environment: Variables named `DASHCAM_` + the key in upper snake case, e.g.
    ///     `DASHCAM_CAMERA_POLL_TIMEOUT_MS` for `camera.pollTimeoutMs`.
    ///   - overrides: Dotted key → value text, e.g. `["camera.fps": "15"]`; lists are comma-separated.
    /// - Throws: Only `ConfigError`.
    public static func load(
        file: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        overrides: [String: String] = [:]
    ) async throws -> AgentConfig {
        let fileContents = try file.map(ConfigFileContents.init(path:))
        var providers: [any ConfigProvider] = [
            try commandLineProvider(overrides),
            environmentProvider(environment),
        ]
        if let fileContents, !fileContents.isEmpty {
            providers.append(try await fileProvider(path: fileContents.path))
        }
        let reader = ConfigReader(providers: providers)
        let inputs = Inputs(overrides: overrides, environment: environment, file: fileContents)

        var config = AgentConfig()
        for key in keys {
            let value: ConfigKeyInfo.Value?
            do {
                value = try await key.fetch(from: reader)
            } catch {
                throw inputs.rejection(of: key)
            }
            if let value, !key.assign(value, &config) {
                throw inputs.rejection(of: key)
            }
        }
        if config.camera.source == .file, config.camera.file == nil {
            throw ConfigError.missingKey(
                "camera.file", reason: "camera.source is 'file'; set it to the video file to play")
        }
        return config
    }

    private static func commandLineProvider(_ overrides: [String: String]) throws(ConfigError) -> InMemoryProvider {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        // Sorted so that with several bad overrides the same one is reported every time.
        for (name, text) in overrides.sorted(by: { $0.key < $1.key }) {
            guard let key = keysByName[name] else {
                throw .unknownKey(name, at: .commandLine)
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

    /// The raw inputs, kept to tell the user which value was rejected and where it was written.
    private struct Inputs {
        let overrides: [String: String]
        let environment: [String: String]
        let file: ConfigFileContents?

        func rejection(of key: ConfigKeyInfo) -> ConfigError {
            let origin = origin(of: key)
            return .invalidValue(key.name, value: origin?.text ?? "?", expected: key.expected, at: origin?.place)
        }

        /// Same order as the providers handed to ConfigReader.
        private func origin(of key: ConfigKeyInfo) -> (text: String, place: ConfigError.Place)? {
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
}
