public import ConfigSupport
import Foundation
import Yams

/// Which device a bearer token belongs to, read from a YAML mapping `token: device-id`.
public struct DeviceTokens: Sendable {
    private let devices: [String: String]

    public init(_ devices: [String: String]) { self.devices = devices }

    /// Reads `file`, the value of `key`. The file holds every device's secret, so it must be
    /// private to its owner (no permission for group or others, e.g. mode 0600); a problem is a
    /// ``ConfigError`` about `key`.
    public init(file: String, key: String = "server.tokensFile") throws(ConfigError) {
        let text = try PrivateFile.read(file, key: key, holding: "every device's token (YAML token: device-id)")
        guard let mapping = try? YAMLDecoder().decode([String: String].self, from: text), !mapping.isEmpty else {
            throw .invalidOption(key, file, "a YAML mapping of token to device id, with at least one entry")
        }
        // The tokens themselves are never printed.
        if mapping.contains(where: { $0.key.isEmpty || $0.value.isEmpty }) {
            throw .invalidOption(key, file, "tokens and device ids that are not empty")
        }
        self.init(mapping)
    }

    /// The device for an `Authorization` header value, if it is `Bearer <known token>`.
    public func device(authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return nil }
        return devices[String(authorization.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)]
    }
}
