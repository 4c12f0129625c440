import Foundation

/// What the guidance server sends the agent (text messages, JSON).
public enum ServerMessage: Sendable, Equatable {
    case welcome(session: String, remainingSeconds: Int?)
    case ack(seq: Int)
    case guidance(Guidance)
    case usage(remainingSeconds: Int)
    case error(code: ErrorCode, message: String, seq: Int?)
    /// How much of a clip's files the server holds (additive).
    case clipHave(ClipHave)
    /// A `type` this version does not know: ignored, so servers can add messages.
    case unknown(type: String)

    public struct Guidance: Codable, Sendable, Equatable {
        public var seq: Int
        public var text: String
        /// BCP 47 language tag of `text`.
        public var lang: String?
        /// Nothing to report for this segment (`text` may be empty).
        public var clear: Bool
        public var priority: Priority

        public init(seq: Int, text: String, lang: String?, clear: Bool, priority: Priority) {
            self.seq = seq
            self.text = text
            self.lang = lang
            self.clear = clear
            self.priority = priority
        }
    }

    public enum Priority: String, Codable, Sendable {
        case normal, urgent
    }

    public enum ErrorCode: Sendable, Equatable {
        case unauthorized, quotaExhausted, badSegment, superseded, `internal`
        /// A message that cannot be read, or comes out of order (a second `hello`, chunks without a header).
        case badMessage
        /// The model service behind the server is down: no guidance for now, though segments are
        /// still acknowledged. The agent says so once, not per segment.
        case guidanceUnavailable
        /// A `clip` or `clip_part` that breaks a rule or could not be kept: nothing of it was.
        case badClip
        case other(String)

        public init(rawValue: String) {
            self =
                switch rawValue {
                case "unauthorized": .unauthorized
                case "quota_exhausted": .quotaExhausted
                case "bad_segment": .badSegment
                case "superseded": .superseded
                case "internal": .internal
                case "bad_message": .badMessage
                case "guidance_unavailable": .guidanceUnavailable
                case "bad_clip": .badClip
                default: .other(rawValue)
                }
        }

        public var rawValue: String {
            switch self {
            case .unauthorized: "unauthorized"
            case .quotaExhausted: "quota_exhausted"
            case .badSegment: "bad_segment"
            case .superseded: "superseded"
            case .internal: "internal"
            case .badMessage: "bad_message"
            case .guidanceUnavailable: "guidance_unavailable"
            case .badClip: "bad_clip"
            case .other(let value): value
            }
        }
    }
}

/// A server message that could not be read; the session goes on.
public struct ProtocolError: Error, CustomStringConvertible, Equatable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension ServerMessage {
    /// Reads one text message. Unknown types decode as ``unknown(type:)``; unknown fields are ignored.
    public static func decode(_ text: String) throws(ProtocolError) -> ServerMessage {
        let data = Data(text.utf8)
        let decoder = JSONDecoder()
        do {
            let envelope = try decoder.decode(Envelope.self, from: data)
            switch envelope.type {
            case "welcome":
                let welcome = try decoder.decode(Welcome.self, from: data)
                return .welcome(session: welcome.session, remainingSeconds: welcome.usage?.remainingSeconds)
            case "ack":
                return .ack(seq: try decoder.decode(Ack.self, from: data).seq)
            case "guidance":
                return .guidance(try decoder.decode(Guidance.self, from: data))
            case "usage":
                return .usage(remainingSeconds: try decoder.decode(Usage.self, from: data).remainingSeconds)
            case "clip_have":
                return .clipHave(try decoder.decode(ClipHave.self, from: data))
            case "error":
                let error = try decoder.decode(ErrorBody.self, from: data)
                return .error(code: .init(rawValue: error.code), message: error.message ?? "", seq: error.seq)
            default:
                return .unknown(type: envelope.type)
            }
        } catch let error as DecodingError {
            throw ProtocolError(Self.describe(error))
        } catch {
            throw ProtocolError("\(error)")
        }
    }

    /// The message as the server writes it.
    public func encoded() -> String {
        let object: any Encodable =
            switch self {
            case .welcome(let session, let remaining):
                Welcome(session: session, usage: .init(remainingSeconds: remaining))
            case .ack(let seq): Ack(seq: seq)
            case .guidance(let guidance): Typed(type: "guidance", body: guidance)
            case .usage(let remaining): Usage(remainingSeconds: remaining)
            case .error(let code, let message, let seq): ErrorBody(code: code.rawValue, message: message, seq: seq)
            case .clipHave(let have): Typed(type: "clip_have", body: have)
            case .unknown(let type): Envelope(type: type)
            }
        return JSONText.encode(object)
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .dataCorrupted(let context) where context.codingPath.isEmpty: "not JSON"
        case .typeMismatch(_, let context) where context.codingPath.isEmpty: "not a JSON object"
        case .keyNotFound(let key, _): "missing field '\(key.stringValue)'"
        case .typeMismatch(let type, let context): "field '\(context.codingPath.map(\.stringValue).joined(separator: "."))' is not \(type)"
        case .valueNotFound(_, let context): "field '\(context.codingPath.map(\.stringValue).joined(separator: "."))' is null"
        case .dataCorrupted(let context):
            "field '\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
        @unknown default: "\(error)"
        }
    }
}

// Wire shapes. Each carries its `type` so encoding writes it and decoding may check it.
private struct Envelope: Codable { var type: String }

private struct Welcome: Codable {
    struct Usage: Codable {
        var remainingSeconds: Int?
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            // `null` means unlimited and is written out, not left away.
            try container.encode(remainingSeconds, forKey: .remainingSeconds)
        }
    }
    var type = "welcome"
    var session: String
    var usage: Usage?
}

private struct Ack: Codable {
    var type = "ack"
    var seq: Int
}

private struct Usage: Codable {
    var type = "usage"
    var remainingSeconds: Int
}

private struct ErrorBody: Codable {
    var type = "error"
    var code: String
    var message: String?
    var seq: Int?
}

/// Adds `"type"` to a body that has none of its own.
struct Typed<Body: Encodable>: Encodable {
    enum Key: CodingKey { case type }
    var type: String
    var body: Body
    func encode(to encoder: any Encoder) throws {
        try body.encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(type, forKey: .type)
    }
}

enum JSONText {
    static func encode(_ value: any Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding our own plain structs cannot fail; an empty object is the safe fallback.
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
