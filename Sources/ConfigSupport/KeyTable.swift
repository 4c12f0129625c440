import Configuration

/// `Root.keys` indexed for loading: by name, and grouped into sections.
struct KeyTable<Root: LoadableConfig> {
    let keys: [ConfigKeyInfo<Root>]
    let byName: [String: ConfigKeyInfo<Root>]
    /// Section name → its keys, in table order.
    let sections: [(name: String, keys: [ConfigKeyInfo<Root>])]

    init(_ keys: [ConfigKeyInfo<Root>] = Root.keys) {
        self.keys = keys
        byName = Dictionary(keys.map { ($0.name, $0) }) { first, _ in
            preconditionFailure("\(Root.self).keys lists '\(first.name)' more than once")
        }
        sections = keys.reduce(into: []) { sections, key in
            if sections.last?.name == key.section {
                sections[sections.count - 1].keys.append(key)
            } else {
                sections.append((key.section, [key]))
            }
        }
    }

    /// The known key a mistyped one most likely meant: one within two edits (ignoring case),
    /// else the same key name under another section.
    func closest(to unknown: String) -> String? {
        let candidates = keys.map(\.name) + sections.map(\.name)
        let lowered = unknown.lowercased()
        let nearest = candidates.map { ($0, editDistance($0.lowercased(), lowered)) }.min { $0.1 < $1.1 }
        if let nearest, nearest.1 <= 2 {
            return nearest.0
        }
        let leaf = lowered.split(separator: ".").last.map(String.init) ?? lowered
        return keys.first { $0.leaf.lowercased() == leaf }?.name
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

/// How keys are read from environment variables.
enum ConfigEnvironment {
    /// Variables named `prefix` + `_` + the key in upper snake case, e.g. `DASHCAM_CAMERA_FPS`.
    static func provider(_ environment: [String: String], prefix: String) -> some ConfigProvider {
        EnvironmentVariablesProvider(environmentVariables: environment)
            .prefixKeys(with: ConfigKey(prefix))
    }

    /// Asks the provider itself how it spells a key, so the docs and error messages can't
    /// disagree with how swift-configuration encodes camelCase.
    static func variable(for name: String, prefix: String) -> String {
        let lookup = try? provider([:], prefix: prefix).value(forKey: AbsoluteConfigKey(ConfigKey(name)), type: .string)
        return lookup?.encodedKey ?? name
    }
}
