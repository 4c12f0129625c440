import Crypto
import Foundation
import GuidanceServer

/// Everything pairing, the owners' pages and payments read from outside: one input's first byte
/// picks the parser, the rest is what a peer sent.
/// - 0: a form body (the OAuth endpoints, the owners' forms);
/// - 1: a payment webhook, `SIGNATURE-HEADER\nBODY`, against the simulated provider's secret;
/// - 2: an access token at the upgrade or in an `auth` message, and the same text as a device's
///   static token in an `Authorization` header;
/// - 3: a typed pairing code;
/// - 4: a product in the config (`NAME=SECONDS=PRICE`);
/// - 5: any text shown in an owner page (a car's name, a label, a reflected link token), escaped
///   by scalar: no raw `"`, `'`, `<` or `>` scalar may come out, and every `&` starts an entity;
/// - 6: a new password: accepted only if bcrypt would read it whole (at most 72 bytes, no NUL);
/// - 7: a `Range` header of a clip's download: a part is always within the file;
/// - 8: an `Accept-Language` header: a language the pages are written in, or none; the page
///   texts of it render a phrase with a value escaped.
enum Pairing {
    static let secret = Array("fuzzing secret, 32 bytes long...".utf8)
    static let provider = SimulatedProvider(secret: secret)
    static let tokens = AccessTokens(key: secret)
    static let now: Int64 = 1_780_000_000
    static let staticTokens = ["tok-0": "car-0", "\u{00A0}tok-1": "car-1"]
    static let deviceTokens = StaticDeviceTokens(staticTokens)

    static func run(_ input: UnsafeRawBufferPointer) {
        guard let kind = input.first else { return }
        let rest = Data(input.dropFirst())
        let text = String(decoding: rest, as: UTF8.self)
        switch kind % 9 {
        case 0:
            if let fields = FormBody.parse(Substring(text)) {
                require(fields.count <= text.utf8.count / 1 + 1, "more fields than bytes")
            }
        case 1:
            let newline = rest.firstIndex(of: UInt8(ascii: "\n")) ?? rest.endIndex
            let header = String(decoding: rest[rest.startIndex..<newline], as: UTF8.self)
            let body = newline < rest.endIndex ? rest[(newline + 1)...] : Data()
            if case .success(let event) = provider.readWebhook(signature: header, body: Data(body), nowSeconds: now) {
                // Believed only if it carries a signature of exactly this body under the secret.
                // (Hex digits in either case are the same signature: found by this target.)
                let expected = WebhookSignature.header(
                    body: Data(body), secret: SymmetricKey(data: secret), timestamp: timestamp(header) ?? 0)
                require(
                    header.lowercased().contains(expected.components(separatedBy: "v1=")[1]), "a webhook believed without its signature")
                require(
                    !event.id.isEmpty && event.id.count <= 128 && !event.paymentID.isEmpty && event.paymentID.count <= 128,
                    "an event id or payment id out of bounds")
            }
        case 2:
            // Spaces and tabs around a static token are trimmed, and nothing else is: a device only
            // for a header whose token is exactly one in the file.
            for header in ["Bearer " + text, text] {
                if let device = deviceTokens.device(authorization: header) {
                    let token = header.dropFirst("Bearer ".count).trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
                    require(
                        header.hasPrefix("Bearer ") && deviceTokens.knownDevice(authorization: "Bearer " + token) == device
                            && staticTokens[token] == device,
                        "a device for a header whose token is not in the file: \(header.debugDescription)")
                }
            }
            if let claims = tokens.verify(text, nowSeconds: now) {
                require(claims.exp > now && !claims.sub.isEmpty, "an expired or empty token accepted")
                let (again, _) = tokens.issue(device: claims.sub, owner: claims.owner, nowSeconds: claims.iat)
                require(again.count <= AccessTokens.maxLength + 512, "a token grows past its limit")
            }
        case 3:
            if let code = DeviceCodes.normalize(text) {
                require(code.count == 9 && code.allSatisfy { $0.isASCII && $0.isNumber }, "a code that is not nine digits: \(code)")
            }
        case 5:
            let escaped = Array(HTMLText.escape(text).unicodeScalars)
            require(!escaped.contains { "\"'<>".unicodeScalars.contains($0) }, "a raw markup scalar: \(text.debugDescription)")
            for (index, scalar) in escaped.enumerated() where scalar == "&" {
                let rest = String(String.UnicodeScalarView(escaped[index...].prefix(6)))
                require(
                    ["&lt;", "&gt;", "&amp;", "&quot;", "&#39;"].contains { rest.unicodeScalars.starts(with: $0.unicodeScalars) },
                    "a raw & from \(text.debugDescription)")
            }
        case 7:
            for size in [0, 1, 1000, 1 << 40] {
                if case .part(let range) = ByteRange.parse(text, size: size) {
                    require(
                        range.lowerBound >= 0 && range.upperBound < size,
                        "a range outside a file of \(size) bytes: \(text.debugDescription)")
                }
            }
        case 8:
            if let language = PageText.language(acceptLanguage: text) {
                require(PageText.languages.contains { $0.code == language }, "a language the pages are not written in: \(language)")
                let text = PageText.of(language)
                require(
                    text.language == language && !text("Buy usage for {name}", ["name": "x"]).contains("{name}"), "a phrase left unfilled")
            }
        case 6:
            if PasswordRules.problem(text, again: text) == nil {
                require(text.utf8.count <= 72 && !text.unicodeScalars.contains("\u{0}") && text.count >= 10, "a password bcrypt would cut")
            }
        case 4:
            if let product = Product(text) {
                require(
                    (1...100_000_000).contains(product.seconds) && product.name.count <= 64 && product.price.count <= 64,
                    "a product out of bounds")
            }
        default:
            break
        }
    }

    private static func timestamp(_ header: String) -> Int64? {
        // As the server reads it, exactly.
        header.split(separator: ",").first { $0.hasPrefix("t=") }.flatMap { Int64($0.dropFirst(2)) }
    }
}
