public import Crypto
public import Foundation

/// The signature on a payment provider's webhook, as real providers send it: a header
/// `t=UNIX_SECONDS,v1=HEX` where HEX is HMAC-SHA256, under the endpoint's secret, of
/// `"<t>.<raw body>"` (Stripe's scheme; more than one `v1` may be present while a secret is
/// being rotated). A webhook is believed only if one `v1` matches the body byte for byte and `t`
/// is within ``toleranceSeconds`` of the server's clock, so a captured request cannot be replayed
/// later. That the same payment is credited only once is the ledger's (a payment id is unique).
public struct WebhookSignature: Sendable {
    public var toleranceSeconds: Int64 = 300
    /// Longest header read; anything longer is refused before it is split.
    public static let maxHeaderLength = 1024

    public init(toleranceSeconds: Int64 = 300) { self.toleranceSeconds = toleranceSeconds }

    public enum Failure: String, Error, Sendable, Equatable {
        /// No header, or not `t=…,v1=…`.
        case malformed
        /// `t` is outside the tolerance window.
        case stale
        /// No `v1` matches the body under the secret.
        case mismatch
    }

    /// The header a provider (the simulated one) sends for `body` at `timestamp`.
    public static func header(body: Data, secret: SymmetricKey, timestamp: Int64) -> String {
        "t=\(timestamp),v1=\(StreamSession.StateMachine.hex(mac(body: body, secret: secret, timestamp: timestamp)))"
    }

    public func verify(header: String?, body: Data, secret: SymmetricKey, nowSeconds: Int64) -> Result<Void, Failure> {
        guard let header, header.utf8.count <= Self.maxHeaderLength else { return .failure(.malformed) }
        var timestamp: Int64?
        var signatures: [Data] = []
        for part in header.split(separator: ",") {
            // Read exactly as providers write it: no spaces, no empty names ("=t=1" is not `t`, nor
            // is "t =1"; both found by the pairing fuzz target).
            let pair = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2 else { return .failure(.malformed) }
            let (key, value) = (String(pair[0]), String(pair[1]))
            switch key {
            case "t":
                // Digits only, at most 12 of them: a number checked before any arithmetic.
                guard timestamp == nil, (1...12).contains(value.count), value.allSatisfy(\.isASCIIDigit),
                    let seconds = Int64(value)
                else { return .failure(.malformed) }
                timestamp = seconds
            case "v1":
                guard let bytes = Self.unhex(value), bytes.count == SHA256.byteCount else { return .failure(.malformed) }
                signatures.append(bytes)
            default:
                continue  // other schemes (v0, …) are ignored, as providers document
            }
        }
        guard let timestamp, !signatures.isEmpty, signatures.count <= 8 else { return .failure(.malformed) }
        guard abs(nowSeconds - timestamp) <= toleranceSeconds else { return .failure(.stale) }
        let prefix = Data("\(timestamp).".utf8)
        for signature in signatures where HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: prefix + body, using: secret) {
            return .success(())
        }
        return .failure(.mismatch)
    }

    private static func mac(body: Data, secret: SymmetricKey, timestamp: Int64) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: Data("\(timestamp).".utf8) + body, using: secret))
    }

    /// The bytes of `text`'s hex digits (either case), two per byte; `nil` for anything else.
    static func unhex(_ text: String) -> Data? {
        let utf8 = Array(text.utf8)
        guard utf8.count.isMultiple(of: 2) else { return nil }
        var out = Data(capacity: utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

private extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
