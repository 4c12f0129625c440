import Foundation
import UTC

/// What the agent sends the server as text; segment bytes follow a ``SegmentHeader`` as binary.
public enum ClientMessage: Sendable, Equatable {
    case hello(Hello)
    case segment(SegmentHeader)
    /// A paired car's new access token, sent before the one its session opened with runs out,
    /// so a long stream is never dropped for it (additive: a server that does not know it ignores it).
    case auth(Auth)
    /// An incident the car's G-sensor saved (additive): the server keeps the segments it names
    /// whatever its analysis says. Sent when the incident opens and again, `final`, when it
    /// closes, with the same `id`; sent again on a new session until the incident is old.
    case incident(Incident)
    /// An event's evidence to upload (additive): see ``Clip``.
    case clip(Clip)
    /// Bytes of a clip's file; one binary message follows.
    case clipPart(ClipPart)
    case unknown(type: String)

    public struct Incident: Codable, Sendable, Equatable {
        /// The car's own name for it: 1 to ``maxIDLength`` of letters, digits, `.`, `_`, `-`.
        public var id: String
        /// The first impact, RFC 3339 UTC with milliseconds.
        public var at: String
        /// The window kept: from `before` ahead of the first impact to `after` behind the last.
        public var from: String
        public var to: String
        /// The largest gravity-removed acceleration, in g.
        public var peakG: Double
        /// This stream's segments that overlap the window, as far as they are recorded.
        public var seqs: [Int]
        /// The window is closed and `seqs` complete.
        public var final: Bool

        public static let maxIDLength = 64
        public static let maxSeqs = 64
        /// Longest window, seconds: a minute of impacts and the seconds around them.
        public static let maxWindowSeconds = 180.0
        public static let maxPeakG = 1000.0

        public init(id: String, at: String, from: String, to: String, peakG: Double, seqs: [Int], final: Bool) {
            self.id = id
            self.at = at
            self.from = from
            self.to = to
            self.peakG = peakG
            self.seqs = seqs
            self.final = final
        }

        /// What is wrong with it, checked before anything is done with it; nil if nothing.
        public var problem: String? {
            guard ClientMessage.isID(id, maxLength: Self.maxIDLength) else {
                return "an incident id must be 1 to \(Self.maxIDLength) letters, digits, '.', '_' or '-'"
            }
            guard peakG.isFinite, (0...Self.maxPeakG).contains(peakG) else { return "peakG must be within 0…\(Int(Self.maxPeakG))" }
            guard seqs.count <= Self.maxSeqs, seqs.allSatisfy({ (0...Int(Int32.max)).contains($0) }) else {
                return "seqs must be at most \(Self.maxSeqs) numbers within 0…\(Int32.max)"
            }
            guard let start = Date(rfc3339: from), let end = Date(rfc3339: to), let first = Date(rfc3339: at) else {
                return "at, from and to must be RFC 3339 times"
            }
            guard start <= first, first <= end, end.timeIntervalSince(start) <= Self.maxWindowSeconds else {
                return "from ≤ at ≤ to, at most \(Int(Self.maxWindowSeconds)) s apart"
            }
            return nil
        }
    }

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
        /// The car's GPS track over the segment, a point a second (additive; only with a GPS).
        public var gps: [GPSPosition]?

        /// Most points a header may carry: a second each of the longest segment, and a few more.
        public static let maxPositions = 130

        public init(
            seq: Int, capturedAt: String, durationMs: Int, frames: Int, bytes: Int, sha256: String,
            chunks: Int?, gps: [GPSPosition]? = nil
        ) {
            self.gps = gps
            self.seq = seq
            self.capturedAt = capturedAt
            self.durationMs = durationMs
            self.frames = frames
            self.bytes = bytes
            self.sha256 = sha256
            self.chunks = chunks
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
            case "incident": return .incident(try decoder.decode(Incident.self, from: data))
            case "clip": return .clip(try decoder.decode(Clip.self, from: data))
            case "clip_part": return .clipPart(try decoder.decode(ClipPart.self, from: data))
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
        case .incident(let incident): JSONText.encode(Typed(type: "incident", body: incident))
        case .clip(let clip): JSONText.encode(Typed(type: "clip", body: clip))
        case .clipPart(let part): JSONText.encode(Typed(type: "clip_part", body: part))
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
    /// The server is restarting (a deploy, `systemctl restart`): come back, but not all at once.
    case serviceRestart = 1012
    case superseded = 4000
    case idle = 4001
    case unauthorized = 4401
    case quotaExhausted = 4402
}
