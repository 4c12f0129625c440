public import Foundation

/// Keeps a generated block of a document (between `<!-- BEGIN name -->` and `<!-- END name -->`)
/// equal to what the code generates; `UPDATE_CONFIG_DOCS=1` rewrites it instead of failing.
public enum GeneratedSection {
    /// `nil` when the document matches (or was just rewritten); else the documented text.
    public static func mismatch(in file: URL, name: String, generated: String) throws -> String? {
        let text = try String(contentsOf: file, encoding: .utf8)
        guard let begin = text.range(of: "<!-- BEGIN \(name) -->\n"), let end = text.range(of: "<!-- END \(name) -->") else {
            return "(no '\(name)' markers in \(file.lastPathComponent))"
        }
        let documented = String(text[begin.upperBound..<end.lowerBound])
        guard documented != generated else { return nil }
        if ProcessInfo.processInfo.environment["UPDATE_CONFIG_DOCS"] == "1" {
            try text.replacingCharacters(in: begin.upperBound..<end.lowerBound, with: generated)
                .write(to: file, atomically: true, encoding: .utf8)
            return nil
        }
        return documented
    }
}
