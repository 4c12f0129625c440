import Foundation
import Yams

/// Which device a bearer token belongs to, read from a YAML mapping `token: device-id`.
public struct DeviceTokens: Sendable {
    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    private let devices: [String: String]

    public init(_ devices: [String: String]) { self.devices = devices }

    public init(file: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw LoadError(description: "\(file): cannot read the tokens file: \(error.localizedDescription)")
        }
        guard let mapping = try? YAMLDecoder().decode([String: String].self, from: text), !mapping.isEmpty else {
            throw LoadError(description: "\(file): expected a YAML mapping of token to device id, with at least one entry")
        }
        self.init(mapping)
    }

    /// The device for an `Authorization` header value, if it is `Bearer <known token>`.
    public func device(authorization: String?) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return nil }
        return devices[String(authorization.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)]
    }
}
