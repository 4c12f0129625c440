import ConfigSupport
import Foundation

/// A file that holds secrets (device tokens, an API key): readable only by its owner.
enum PrivateFile {
    /// The text of `file`, the value of config key `key`; `holding` completes "a readable file
    /// of …". A file that group or others may read is refused, with the `chmod` that fixes it.
    static func read(_ file: String, key: String, holding what: String) throws(ConfigError) -> String {
        let mode: Int
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0
        } catch {
            throw .invalidOption(key, file, "a readable file of \(what) (cannot read it: \(error.localizedDescription))")
        }
        guard mode & 0o077 == 0 else {
            throw .invalidOption(
                key, file,
                "a file only its owner may read, since it holds \(what) (it is mode \(String(mode, radix: 8)); chmod 600 \(file))")
        }
        do {
            return try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw .invalidOption(key, file, "a readable file of \(what) (cannot read it: \(error.localizedDescription))")
        }
    }
}
