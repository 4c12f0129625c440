public import ConfigSupport
import Foundation
import CDispatch  // where Swift finds `timespec` (st_mtim) on Linux
public import Logging
import Synchronization
import Yams

/// Which device a bearer token belongs to, read from a YAML mapping `token: device-id`.
///
/// The device id counts from this file alone: the `device` an agent names in its `hello`
/// (`uplink.deviceId`) is a label, logged when it differs, never trusted for the ledger or the lease.
///
/// Read from a file, the mapping follows the file: each upgrade looks at the file's inode, size
/// and modification time, and a changed file is read again, so `guidance-server token add` (or an
/// edit) takes effect without a restart. A change that cannot be read (a half-written file, a
/// wrong mode) is logged and the tokens read last stay in force.
public struct StaticDeviceTokens: Sendable {
    private let source: Source

    private enum Source: Sendable {
        case fixed([String: String])
        case file(Watched)
    }

    public init(_ devices: [String: String]) { source = .fixed(devices) }

    /// Reads `file`, the value of `key`. The file holds every device's secret, so it must be
    /// private to its owner (no permission for group or others, e.g. mode 0600); a problem is a
    /// ``ConfigError`` about `key`.
    public init(file: String, key: String = "server.tokensFile", logger: Logger? = nil) throws(ConfigError) {
        let stamp = FileStamp(file)
        source = .file(Watched(file: file, key: key, devices: try Self.parse(file: file, key: key), stamp: stamp, logger: logger))
    }

    /// The device for an `Authorization` header value, if it is `Bearer <known token>`.
    public func device(authorization: String?) -> String? {
        Self.token(authorization).flatMap { devices[$0] }
    }

    /// ``device(authorization:)`` in the mapping as last read, without looking at the file: for
    /// checks made of every open session at once, after one ``refresh()``.
    public func knownDevice(authorization: String?) -> String? {
        guard let token = Self.token(authorization) else { return nil }
        switch source {
        case .fixed(let devices): return devices[token]
        case .file(let watched): return watched.lastRead[token]
        }
    }

    /// The token of `Bearer <token>`, if the header is that.
    private static func token(_ authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return nil }
        // Spaces and tabs around it trimmed in Swift: Foundation's `trimmingCharacters(in:)` took
        // more of a new session's CPU than the rest of its token check.
        var token = authorization.dropFirst("Bearer ".count)
        while let first = token.first, first == " " || first == "\t" { token.removeFirst() }
        while let last = token.last, last == " " || last == "\t" { token.removeLast() }
        return String(token)
    }

    /// Reads the file again if it changed, as every ``device(authorization:)`` does first.
    public func refresh() { _ = devices }

    /// The mapping in force now (read again first if the file changed).
    var devices: [String: String] {
        switch source {
        case .fixed(let devices): devices
        case .file(let watched): watched.current()
        }
    }

    /// The mapping in `file`: a YAML mapping of token to device id, with at least one entry at
    /// start (`allowEmpty` for a file read again: the last device removed leaves none).
    static func parse(file: String, key: String, allowEmpty: Bool = false) throws(ConfigError) -> [String: String] {
        let text = try PrivateFile.read(file, key: key, holding: "every device's token (YAML token: device-id)")
        let expected = "a YAML mapping of token to device id, with at least one entry (guidance-server token add DEVICE makes one)"
        // The composed mapping is walked once: YAMLDecoder looks each key up again in the mapping,
        // which for a fleet's file grew with the square of its size (1.7 s of CPU at 5000 tokens,
        // paid on the connection that first sees a changed file).
        guard let node = try? Yams.compose(yaml: text), let pairs = node.mapping else { throw .invalidOption(key, file, expected) }
        var mapping: [String: String] = [:]
        mapping.reserveCapacity(pairs.count)
        for (token, device) in pairs {
            // Yams composes a mapping with a key twice as an error, so each token is here once.
            guard let token = token.scalar?.string, let device = String.construct(from: device) else {
                throw .invalidOption(key, file, expected)
            }
            mapping[token] = device
        }
        guard allowEmpty || !mapping.isEmpty else { throw .invalidOption(key, file, expected) }
        // The tokens themselves are never printed.
        if mapping.contains(where: { $0.key.isEmpty || $0.value.isEmpty }) {
            throw .invalidOption(key, file, "tokens and device ids that are not empty")
        }
        return mapping
    }

    /// The tokens file and what was last read from it.
    final class Watched: Sendable {
        let file: String
        let key: String
        let logger: Logger?
        private let state: Mutex<(devices: [String: String], stamp: FileStamp?)>

        init(file: String, key: String, devices: [String: String], stamp: FileStamp?, logger: Logger?) {
            self.file = file
            self.key = key
            self.logger = logger
            state = Mutex((devices, stamp))
        }

        var lastRead: [String: String] { state.withLock { $0.devices } }

        func current() -> [String: String] {
            let now = FileStamp(file)
            let (devices, changed) = state.withLock { state in (state.devices, state.stamp != now) }
            guard changed else { return devices }
            do {
                let fresh = try StaticDeviceTokens.parse(file: file, key: key, allowEmpty: true)
                state.withLock { $0 = (fresh, now) }
                logger?.notice("tokens: \(file) changed; \(fresh.count) device token(s) in force")
                return fresh
            } catch {
                // Remembered as seen, so this is logged once; fixed (a new stamp), it is read again.
                state.withLock { $0.stamp = now }
                logger?.error("tokens: \(file) changed but cannot be used, the tokens read before stay in force: \(error)")
                return devices
            }
        }
    }
}

/// What tells a changed file: inode, size and modification time (to the nanosecond).
///
/// One `stat(2)`, taken at every upgrade: Foundation's `attributesOfItem` also lists the file's
/// extended attributes and looks its owner and group up by name (`/etc/passwd`, `/etc/group`),
/// which made it most of what a new session cost the server.
struct FileStamp: Equatable, Sendable {
    let inode: UInt64
    let size: Int64
    let modifiedSeconds: Int
    let modifiedNanoseconds: Int

    init?(_ path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
        modifiedSeconds = Int(info.st_mtim.tv_sec)
        modifiedNanoseconds = Int(info.st_mtim.tv_nsec)
    }
}

/// Adds and removes device tokens in a tokens file, as `guidance-server token` does. The file is
/// written whole, to a temporary file (mode 0600) beside it that is synced and renamed over it,
/// so a running server never reads half of it.
public enum TokensFileEditor {
    public struct EditError: Error, CustomStringConvertible {
        public let description: String
    }

    /// A new random token for `device`: 32 bytes from the system's random source, base64url.
    /// With `replace`, a device that has a token gets a new one (the old stops working);
    /// without, that is an error. A missing file is created.
    public static func add(device: String, file: String, replace: Bool = false) throws -> String {
        guard !device.isEmpty, device.count <= 64, device.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) })
        else {
            throw EditError(description: "'\(device.prefix(80))' is not a device id: use 1 to 64 letters, digits, '-', '_' or '.'")
        }
        var devices = try existing(file)
        if devices.values.contains(device) {
            guard replace else {
                throw EditError(
                    description: "\(device) already has a token in \(file); --replace gives it a new one (the old one stops working)")
            }
            devices = devices.filter { $0.value != device }
        }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let token = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        devices[token] = device
        try write(devices, to: file)
        return token
    }

    /// Removes `device`'s token; its sessions can no longer start.
    public static func remove(device: String, file: String) throws {
        let devices = try existing(file)
        guard devices.values.contains(device) else { throw EditError(description: "\(device) has no token in \(file)") }
        try write(devices.filter { $0.value != device }, to: file)
    }

    /// The device ids that have a token, sorted.
    public static func devices(file: String) throws -> [String] {
        try existing(file).values.sorted()
    }

    private static func existing(_ file: String) throws -> [String: String] {
        guard FileManager.default.fileExists(atPath: file) else { return [:] }
        let text = try PrivateFile.read(file, key: "server.tokensFile", holding: "every device's token (YAML token: device-id)")
        if text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { return [:] }
        return try StaticDeviceTokens.parse(file: file, key: "server.tokensFile", allowEmpty: true)
    }

    private static func write(_ devices: [String: String], to file: String) throws {
        var text =
            "# Device tokens of the guidance server: token: device-id. Written by `guidance-server token`;\n"
            + "# the server reads it again when it changes. Keep it mode 0600.\n"
        for (token, device) in devices.sorted(by: { ($0.value, $0.key) < ($1.value, $1.key) }) {
            text += "\"\(token)\": \"\(device)\"\n"
        }
        if devices.isEmpty { text += "{}\n" }
        do {
            try ConfigFileWriter.replace(file, with: text, mode: 0o600)
        } catch {
            throw EditError(description: error.description)
        }
    }
}
