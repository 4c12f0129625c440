import AsyncHTTPClient
import Foundation
public import NIOCore
import NIOHTTP1
public import NIOSSL

/// The car's two calls to the guidance server's OAuth endpoints (RFC 8628 §3.1 and §3.4, RFC 6749
/// §6), on the server the uplink streams to: `wss://HOST:PORT/…` → `https://HOST:PORT/oauth/…`,
/// with the uplink's TLS settings. Answers are read up to 16 KiB and decoded field by field;
/// anything else is a failure the state machine retries, never a crash.
public struct PairingClient: Sendable {
    public static let clientID = "dashcam-agent"
    static let maxAnswerBytes = 16 * 1024

    let base: String
    let client: HTTPClient
    let timeout: TimeAmount

    /// `uplinkURL`: `ws://` or `wss://`; `nil` for anything else.
    public init?(uplinkURL: String, tls: TLSConfiguration?, timeout: TimeAmount = .seconds(10)) {
        guard let url = URL(string: uplinkURL), let host = url.host, let scheme = url.scheme else { return nil }
        let web: String
        switch scheme {
        case "wss": web = "https"
        case "ws": web = "http"
        default: return nil
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        base = "\(web)://\(hostPart)\(url.port.map { ":\($0)" } ?? "")"
        var configuration = HTTPClient.Configuration()
        if let tls { configuration.tlsConfiguration = tls }
        configuration.redirectConfiguration = .disallow
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.timeout = timeout
    }

    public func shutdown() async { try? await client.shutdown() }

    public struct Code: Sendable, Equatable {
        public var deviceCode: String
        public var userCode: String
        public var verificationURI: String
        public var expiresIn: Int
        public var interval: Int
    }

    public enum Failure: Error, CustomStringConvertible {
        case status(Int, String?)
        case unreadable(String)
        case transport(String)

        public var description: String {
            switch self {
            case .status(let status, let error): "HTTP \(status)\(error.map { " (\($0))" } ?? "")"
            case .unreadable(let what): "unreadable answer: \(what)"
            case .transport(let what): what
            }
        }
    }

    /// A new code for this car (`device_name`: what the owner's page shows).
    public func requestCode(deviceName: String) async throws(Failure) -> Code {
        let (status, json) = try await post("/oauth/device_authorization", ["client_id": Self.clientID, "device_name": deviceName])
        guard status == 200 else { throw .status(status, json["error"] as? String) }
        guard let deviceCode = json["device_code"] as? String, !deviceCode.isEmpty, deviceCode.count <= 512,
            let userCode = json["user_code"] as? String, userCode.count == 9, userCode.allSatisfy({ $0.isASCII && $0.isNumber }),
            let expiresIn = json["expires_in"] as? Int
        else { throw .unreadable("no device_code, nine-digit user_code and expires_in") }
        return Code(
            deviceCode: deviceCode, userCode: userCode,
            verificationURI: String((json["verification_uri"] as? String ?? "").prefix(512)),
            expiresIn: expiresIn, interval: json["interval"] as? Int ?? 5)
    }

    /// One poll of the token endpoint with the device code.
    public func poll(deviceCode: String) async -> DevicePairing.PollAnswer {
        do {
            let (status, json) = try await post(
                "/oauth/token",
                [
                    "client_id": Self.clientID, "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": deviceCode
                ])
            if status == 200, let credentials = Self.credentials(json) { return .paired(credentials) }
            switch json["error"] as? String {
            case "authorization_pending": return .pending
            case "slow_down": return .slowDown
            case "expired_token", "invalid_grant": return .expired
            case "access_denied": return .denied
            default: return .failed
            }
        } catch {
            return .failed
        }
    }

    /// New credentials for a refresh token.
    public func renew(refreshToken: String) async -> DeviceCredentials.RenewAnswer {
        do {
            let (status, json) = try await post(
                "/oauth/token",
                [
                    "client_id": Self.clientID, "grant_type": "refresh_token", "refresh_token": refreshToken
                ])
            if status == 200, let credentials = Self.credentials(json) { return .renewed(credentials) }
            if status == 400, json["error"] as? String == "invalid_grant" { return .refused }
            return .failed("HTTP \(status)")
        } catch {
            return .failed(error.description)
        }
    }

    static func credentials(_ json: [String: Any]) -> DevicePairing.Credentials? {
        guard let access = json["access_token"] as? String, !access.isEmpty, access.count <= 4096,
            let refresh = json["refresh_token"] as? String, !refresh.isEmpty, refresh.count <= 512,
            let device = json["device_id"] as? String, !device.isEmpty, device.count <= 128,
            let expiresIn = json["expires_in"] as? Int
        else { return nil }
        let owner = String((json["owner_name"] as? String ?? "").prefix(64))
        return DevicePairing.Credentials(
            deviceId: device, ownerName: owner, accessToken: access, refreshToken: refresh, expiresIn: expiresIn)
    }

    private func post(_ path: String, _ form: [String: String]) async throws(Failure) -> (Int, [String: Any]) {
        var request = HTTPClientRequest(url: base + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let body = form.sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
            .joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await client.execute(request, timeout: timeout)
            bytes = try await response.body.collect(upTo: Self.maxAnswerBytes)
        } catch {
            throw .transport("\(error)")
        }
        let object = try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView))
        return (Int(response.status.code), object as? [String: Any] ?? [:])
    }
}
