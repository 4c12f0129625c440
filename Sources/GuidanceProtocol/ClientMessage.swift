import Foundation

/// What the agent sends the server as text; segment bytes follow a ``SegmentHeader`` as binary.
public enum ClientMessage: Sendable, Equatable {
    case hello(Hello)
    case segment(SegmentHeader)
    /// A paired car's new access token, sent before the one its session opened with runs out,
    /// so a long stream is never dropped for it (additive: a server that does not know it ignores it).
    case auth(Auth)
    case unknown(type: String)

    public struct Auth: Codable, Sendable, Equatable {
        public var token: String
        public init(token: String) { self.token = token }
    }

    public struct Hello: Codable, Sendable, Equatable {
        public struct Video: Codable, Sendable, Equatable {
            public var codec = "hevc"
            public var container = "mp4"
            public var width: Int
            public var height: Int
            public var fps: Int
            public var segmentMs: Int

            public init(width: Int, height: Int, fps: Int, segmentMs: Int) {
                self.width = width
                self.height = height
                self.fps = fps
                self.segmentMs = segmentMs
            }
        }
        public var `protocol`: Int
        public var device: String
        public var locale: String
        public var agent: String
        public var video: Video
        /// Chosen once per agent start (a UUID, say), so that device, stream and seq name one
        /// segment: a server can then recognise a re-sent segment. Optional and additive; written
        /// only when set.
        public var stream: String?

        public init(device: String, locale: String, agent: String, video: Video, stream: String? = nil) {
            self.protocol = GuidanceProtocol.version
            self.device = device
            self.locale = locale
            self.agent = agent
            self.video = video
            self.stream = stream
        }
    }

    public struct SegmentHeader: Codable, Sendable, Equatable {
        public var seq: Int
        /// RFC 3339 UTC with milliseconds.
        public var capturedAt: String
        public var durationMs: Int
        public var frames: Int
        public var bytes: Int
        /// Lower-case hex SHA-256 of the MP4.
        public var sha256: String
        /// Binary messages that follow (chunked mode).
        public var chunks: Int?
        /// The MP4 in base64, from agents of an earlier release; a server refuses it (bad_segment):
        /// segments travel as binary chunks only.
        public var data: String?

        public init(seq: Int, capturedAt: String, durationMs: Int, frames: Int, bytes: Int, sha256: String,
                    chunks: Int?, data: String?) {
            self.seq = seq
            self.capturedAt = capturedAt
            self.durationMs = durationMs
            self.frames = frames
            self.bytes = bytes
            self.sha256 = sha256
            self.chunks = chunks
            self.data = data
        }
    }

    public static func decode(_ text: String) throws(ProtocolError) -> ClientMessage {
        let data = Data(text.utf8)
        let decoder = JSONDecoder()
        do {
            struct Envelope: Decodable { var type: String }
            switch try decoder.decode(Envelope.self, from: data).type {
            case "hello": return .hello(try decoder.decode(Hello.self, from: data))
            case "segment": return .segment(try decoder.decode(SegmentHeader.self, from: data))
            case "auth": return .auth(try decoder.decode(Auth.self, from: data))
            case let other: return .unknown(type: other)
            }
        } catch {
            throw ProtocolError("\(error)")
        }
    }

    public func encoded() -> String {
        switch self {
        case .hello(let hello): JSONText.encode(Typed(type: "hello", body: hello))
        case .segment(let header): JSONText.encode(Typed(type: "segment", body: header))
        case .auth(let auth): JSONText.encode(Typed(type: "auth", body: auth))
        case .unknown(let type): JSONText.encode(Typed(type: type, body: [String: String]()))
        }
    }
}

public enum GuidanceProtocol {
    public static let version = 1
    public static let path = "/v1/stream"
    /// Largest binary chunk, and largest message either side accepts.
    public static let maxMessageBytes = 64 * 1024
}

/// WebSocket close codes of protocol v1.
public enum CloseCode: UInt16, Sendable {
    case normal = 1000
    case goingAway = 1001
    case superseded = 4000
    case idle = 4001
    case unauthorized = 4401
    case quotaExhausted = 4402
}
