import ConfigSupport
import Foundation

/// The key that signs device access tokens: 64 hex digits (32 random bytes) on the first line of
/// a file only its owner may read. Every instance of a fleet's server needs the same file; a
/// server that finds none creates one, so a single server needs no setup.
enum SigningKey {
    static func load(_ file: String, key: String, holding what: String = "the key that signs device access tokens") throws(ConfigError)
        -> [UInt8]
    {
        if !FileManager.default.fileExists(atPath: file) { try create(file, key: key) }
        let text = try PrivateFile.read(file, key: key, holding: what)
        let line = text.split(whereSeparator: \.isNewline).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard line.count >= 64, let bytes = WebhookSignature.unhex(line) else {
            throw .invalidOption(key, file, "a file whose first line is at least 64 hex digits (32 random bytes; `openssl rand -hex 32`)")
        }
        return Array(bytes)
    }

    private static func create(_ file: String, key: String) throws(ConfigError) {
        var generator = SystemRandomNumberGenerator()
        let hex = StreamSession.StateMachine.hex((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
        // O_EXCL: of two servers starting at once, one writes it and the other reads that one.
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { return }
            throw .invalidOption(key, file, "a file this server can create (\(String(cString: strerror(errno))))")
        }
        defer { close(fd) }
        let line = Array((hex + "\n").utf8)
        guard write(fd, line, line.count) == line.count, fsync(fd) == 0 else {
            throw .invalidOption(key, file, "a file this server can write (\(String(cString: strerror(errno))))")
        }
    }
}
