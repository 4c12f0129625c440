import Foundation
import Yams

/// The YAML config file as the user wrote it.
///
/// swift-configuration flattens the file and can't list its keys, so a typo there would silently
/// fall back to the default. This reads the same file with Yams to reject unknown keys and
/// misplaced sections, and to remember each value's text and line for error messages.
struct ConfigFileContents {
    struct Entry {
        let text: String
        let line: Int?
    }

    let path: String
    /// Dotted key → value as written.
    private(set) var entries: [String: Entry] = [:]
    /// No document at all (empty, or only comments): the file sets nothing.
    private(set) var isEmpty = true

    init<Root>(path: String, table: KeyTable<Root>) throws(ConfigError) {
        self.path = path
        guard let root = try Self.parse(Self.read(path), path: path) else {
            return
        }
        isEmpty = false
        guard let sections = root.mapping else {
            throw .notAMapping("", at: place(of: root), validKeys: table.sections.map(\.name))
        }
        for (sectionName, sectionNode) in sections {
            let section = sectionName.scalar?.string ?? "\(sectionName)"
            guard let sectionKeys = table.sections.first(where: { $0.name == section })?.keys else {
                throw .unknownKey(section, at: place(of: sectionName), in: table)
            }
            // A key of its own at the top (`ledger: …`), not a section of keys.
            if let key = table.byName[section], !section.contains(".") {
                guard let text = Self.text(of: sectionNode), sectionNode.null == nil, sectionNode.mapping == nil else {
                    throw .invalidValue(
                        section, value: sectionNode.mapping != nil ? "a mapping" : "\(sectionNode)", expected: key.expected,
                        at: place(of: sectionName))
                }
                entries[section] = Entry(text: text, line: sectionName.mark?.line)
                continue
            }
            guard sectionNode.mapping != nil else {
                throw .notAMapping(section, at: place(of: sectionName), validKeys: sectionKeys.map(\.name))
            }
            try read(sectionNode, prefix: section, table: table)
        }
    }

    /// The keys under `prefix` (a section, or a group in it such as `sensors.accel`), at any depth.
    private mutating func read<Root>(_ node: Node, prefix: String, table: KeyTable<Root>) throws(ConfigError) {
        for (keyName, valueNode) in node.mapping ?? [:] {
            let name = "\(prefix).\(keyName.scalar?.string ?? "\(keyName)")"
            guard let key = table.byName[name] else {
                // A group of keys (`accel:` under `sensors:`) is a mapping of its own.
                if table.byName.keys.contains(where: { $0.hasPrefix(name + ".") }) {
                    guard valueNode.mapping != nil else {
                        throw .notAMapping(
                            name, at: place(of: keyName), validKeys: table.byName.keys.filter { $0.hasPrefix(name + ".") }.sorted())
                    }
                    try read(valueNode, prefix: name, table: table)
                    continue
                }
                throw .unknownKey(name, at: place(of: keyName), in: table)
            }
            // A mapping here would be flattened into keys nobody reads, leaving the default, and
            // a YAML null would be read as the text "~" or "null": both are refused, not guessed at.
            guard let text = Self.text(of: valueNode), valueNode.null == nil else {
                let written = valueNode.scalar?.string ?? (valueNode.mapping != nil ? "a mapping" : "a nested list")
                throw .invalidValue(name, value: written, expected: key.expected, at: place(of: keyName))
            }
            entries[name] = Entry(text: text, line: keyName.mark?.line)
        }
    }

    private func place(of node: Node) -> ConfigError.Place {
        .file(path: path, line: node.mark?.line)
    }

    private static func text(of node: Node) -> String? {
        if let scalar = node.scalar {
            return scalar.string
        }
        guard let items = node.sequence?.map({ $0.scalar?.string }), !items.contains(nil) else {
            return nil
        }
        return "[\(items.compactMap { $0 }.joined(separator: ", "))]"
    }

    private static func read(_ path: String) throws(ConfigError) -> String {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw .fileNotFound(path)
        }
        guard !isDirectory.boolValue else {
            throw .unreadable(path, reason: "it is a directory")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .unreadable(path, reason: "permission denied or I/O error")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw .unreadable(path, reason: "it is not UTF-8 text")
        }
        return text
    }

    /// Parses the way swift-configuration's YAMLSnapshot does, so both see the same document.
    private static func parse(_ text: String, path: String) throws(ConfigError) -> Node? {
        do {
            return try Parser(yaml: text).singleRoot()
        } catch let error as YamlError {
            switch error {
            case .scanner(let context, let problem, let mark, _),
                .parser(let context, let problem, let mark, _),
                .composer(let context, let problem, let mark, _):
                let message = context.map { "\(problem) (\($0.text) at line \($0.mark.line))" } ?? problem
                throw .syntax(path, line: mark.line, message: message)
            case .duplicatedKeysInMapping(let duplicates, let context):
                let keys = duplicates.map { "'\($0)'" }.joined(separator: ", ")
                throw .syntax(path, line: context.mark.line, message: "\(keys) is given more than once")
            default:
                throw .syntax(path, line: nil, message: "\(error)")
            }
        } catch {
            throw .syntax(path, line: nil, message: "\(error)")
        }
    }
}
