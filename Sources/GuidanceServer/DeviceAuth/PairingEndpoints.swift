import Crypto
import Foundation
import GuidanceProtocol
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// The two endpoints a car pairs through (RFC 8628 §3.1–3.5) and renews its credentials at
/// (RFC 6749 §6): `POST /oauth/device_authorization` and `POST /oauth/token`, form-encoded in,
/// JSON out, `Cache-Control: no-store`. Errors are RFC 6749 §5.2's `{"error": …}` with HTTP 400
/// (401 for an unknown client). Device codes and refresh tokens are random, shown to the device
/// once and stored as SHA-256 hashes; none of them, nor a user code, is ever logged.
struct PairingEndpoints: Sendable {
    /// The only client: the agent. RFC 8628 §3.1 needs a `client_id`; a car has no secret to keep.
    static let clientID = "dashcam-agent"
    static let deviceGrant = "urn:ietf:params:oauth:grant-type:device_code"
    /// Longest form body read.
    static let maxBodyBytes = 4096

    let store: any PairingStore
    let tokens: AccessTokens
    /// `verification_uri`: the page an owner types the code on; `nil`: `/pair` on the `Host` asked.
    let verificationURI: String?
    let scheme: String
    let settings: DeviceAuthorization.Settings
    let refreshLifetimeMs: Int64
    let rules: RefreshTokenRules
    /// Cars whose access tokens this instance refuses: a car whose refresh token was reused joins
    /// them here at once (the others learn it from the ledger, ``UnpairWatch``).
    let unpaired: UnpairedDevices
    let logger: Logger
    let now: @Sendable () -> Int64
    /// Codes handed out per address (``RequestBudget``), on this instance.
    let budget = Budget()

    final class Budget: Sendable {
        private let state = Mutex(RequestBudget())
        func allow(_ address: String, nowMs: Int64) -> Bool { state.withLock { $0.allow(address, nowMs: nowMs) } }
    }

    func add(to router: Router<GuidanceRequestContext>) {
        router.post("/oauth/device_authorization") { request, context in
            let address = OwnerPages.address(request, peer: context.channel?.remoteAddress?.ipAddress)
            return try await answer {
                // A peer that asks for code after code fills nothing: ten per address in 10 minutes.
                guard budget.allow(address, nowMs: now()) else {
                    throw Refusal(
                        status: .tooManyRequests, error: "slow_down",
                        description: "too many codes asked for from this address; try again later")
                }
                return try await authorize(form: try await form(request), host: request.head.authority)
            }
        }
        router.post("/oauth/token") { request, context in
            try await answer { try await token(form: try await form(request)) }
        }
    }

    struct Refusal: Error {
        var status: HTTPResponse.Status = .badRequest
        var error: String
        var description: String?
    }

    private func form(_ request: Request) async throws(Refusal) -> [String: String] {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            throw Refusal(error: "invalid_request", description: "the body must be application/x-www-form-urlencoded")
        }
        let buffer: ByteBuffer
        do { buffer = try await request.body.collect(upTo: Self.maxBodyBytes) } catch {
            throw Refusal(error: "invalid_request", description: "the body is over \(Self.maxBodyBytes) bytes")
        }
        // RFC 6749 §3.1: a parameter sent twice is an error, as is a broken encoding.
        guard let fields = FormBody.parse(Substring(String(buffer: buffer))) else {
            throw Refusal(error: "invalid_request", description: "the body is not a form, or names a parameter twice")
        }
        guard fields["client_id"] == Self.clientID else {
            throw Refusal(status: .unauthorized, error: "invalid_client", description: "unknown client_id")
        }
        return fields
    }

    private func authorize(form: [String: String], host: String?) async throws -> Response {
        // A Host header is a name and a port, nothing that could make the link point elsewhere.
        let safeHost = host.flatMap {
            $0.count <= 255 && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-.:[]".contains($0)) } ? $0 : nil
        }
        let verificationURI = self.verificationURI ?? "\(scheme)://\(safeHost ?? "localhost")/pair"
        // The device's own name, shown on the approval page: printable, at most 64 characters, and
        // without direction overrides or isolates, which could make the page show the owner other
        // text than the car sent (``GuidanceText/clean(_:)``).
        let name = String(GuidanceText.clean(form["device_name"] ?? "").prefix(64)).trimmingCharacters(in: .whitespaces)
        var generator = SystemRandomNumberGenerator()
        let deviceCode = DeviceCodes.newDeviceCode(using: &generator)
        let nowMs = now()
        let started: (userCode: String, authorization: DeviceAuthorization)
        do {
            started = try await store.startAuthorization(
                deviceCodeHash: Self.hash(deviceCode), deviceName: name.isEmpty ? "a car" : name, nowMs: nowMs, settings: settings,
                newUserCode: {
                    var generator = SystemRandomNumberGenerator(); return DeviceCodes.newUserCode(using: &generator)
                })
        } catch is PairingFull {
            throw Refusal(
                status: .serviceUnavailable, error: "temporarily_unavailable", description: "too many codes are waiting; try again later")
        }
        let (userCode, authorization) = started
        logger.info(
            "pairing started", metadata: ["device_name": "\(authorization.deviceName)", "user_code": "\(Self.fingerprint(userCode))"])
        return try Self.json(
            .ok,
            [
                "device_code": deviceCode, "user_code": userCode,
                "verification_uri": verificationURI, "verification_uri_complete": verificationURI + "?code=" + userCode,
                "expires_in": authorization.secondsLeft(nowMs: nowMs), "interval": authorization.intervalSeconds
            ])
    }

    private func token(form: [String: String]) async throws -> Response {
        var generator = SystemRandomNumberGenerator()
        let nowMs = now()
        switch form["grant_type"] {
        case Self.deviceGrant?:
            guard let deviceCode = form["device_code"], !deviceCode.isEmpty else {
                throw Refusal(error: "invalid_request", description: "device_code is missing")
            }
            let refresh = DeviceCodes.newDeviceCode(using: &generator)
            let device = "car-" + String(DeviceCodes.newDeviceCode(using: &generator).prefix(12))
            let result = try await store.poll(
                deviceCodeHash: Self.hash(deviceCode), nowMs: nowMs, settings: settings, newDevice: device,
                refreshTokenHash: Self.hash(refresh), refreshExpiresAtMs: nowMs + refreshLifetimeMs)
            switch result {
            case .unknown:
                throw Refusal(error: "invalid_grant", description: "unknown device_code")
            case .outcome(let outcome):
                throw Refusal(error: outcome.error ?? "invalid_grant")
            case .paired(let paired):
                logger.notice(
                    "device paired", metadata: ["device": "\(paired.device)", "owner": "\(paired.owner)", "label": "\(paired.label)"])
                return try await credentials(paired, refresh: refresh, nowMs: nowMs)
            }
        case "refresh_token"?:
            guard let presented = form["refresh_token"], !presented.isEmpty else {
                throw Refusal(error: "invalid_request", description: "refresh_token is missing")
            }
            guard presented.utf8.count <= AccessTokens.maxLength else {
                throw Refusal(error: "invalid_grant", description: "the refresh token is not valid")
            }
            let refresh = tokens.refreshSuccessor(of: presented)
            switch try await store.refresh(
                tokenHash: Self.hash(presented), newTokenHash: Self.hash(refresh), nowMs: nowMs,
                expiresAtMs: nowMs + refreshLifetimeMs, rules: rules)
            {
            case .rotated(let paired):
                return try await credentials(paired, refresh: refresh, nowMs: nowMs)
            case .refused:
                throw Refusal(error: "invalid_grant", description: "the refresh token is not valid")
            case .reused(let device):
                unpaired.add(device)
                logger.warning(
                    "a spent refresh token was used again (a copy, or a car that diverged from it): the car is unpaired and every credential of it revoked; it must pair again",
                    metadata: ["device": "\(device)"])
                throw Refusal(error: "invalid_grant", description: "the refresh token is not valid")
            }
        default:
            throw Refusal(error: "unsupported_grant_type")
        }
    }

    private func credentials(_ paired: PairedDevice, refresh: String, nowMs: Int64) async throws -> Response {
        let (access, claims) = tokens.issue(device: paired.device, owner: paired.owner, nowSeconds: nowMs / 1000)
        let owner = try await store.owner(id: paired.owner)
        return try Self.json(
            .ok,
            [
                "access_token": access, "token_type": "Bearer", "expires_in": Int(claims.exp - claims.iat),
                "refresh_token": refresh, "device_id": paired.device, "owner_name": owner?.displayName ?? ""
            ])
    }

    private func answer(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let refusal as Refusal {
            var fields: [String: any Sendable] = ["error": refusal.error]
            if let description = refusal.description { fields["error_description"] = description }
            return try Self.json(refusal.status, fields)
        }
    }

    static func json(_ status: HTTPResponse.Status, _ fields: [String: any Sendable]) throws -> Response {
        let data = try JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
        return Response(
            status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// Lower-case hex SHA-256: how codes and tokens are stored.
    static func hash(_ secret: String) -> String { StreamSession.StateMachine.hex(SHA256.hash(data: Data(secret.utf8))) }

    /// What a log may say of a user code (or an address typed at sign-in): 6 hex digits of an
    /// HMAC under a key this process drew at start. A plain hash of a nine-digit code is found
    /// again by trying all 10^9 of them (49 candidates were left for 6 digits); without the key
    /// nothing can be tried, and lines of one run still match each other.
    static func fingerprint(_ userCode: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data(userCode.utf8), using: SymmetricKey(data: logKey))
        return String(StreamSession.StateMachine.hex(Array(mac)).prefix(6))
    }

    /// The bytes of that key (`SymmetricKey` is not `Sendable` in this swift-crypto).
    private static let logKey: [UInt8] = {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }()
}
