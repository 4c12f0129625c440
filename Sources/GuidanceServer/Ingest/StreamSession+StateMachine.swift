import Crypto
public import Foundation
public import GuidanceProtocol

extension StreamSession {
    /// The rules of one agent's session as the server reads it, with no socket in sight: `hello`
    /// first, then segment headers, each followed by exactly its chunks. Every number a client sends
    /// is checked against the `hello` and the server's limits before any arithmetic or allocation;
    /// a segment's bytes are gathered in one buffer that grows by appending (linear in its size) and
    /// never beyond `maxSegmentBytes`; its SHA-256 is checked here too.
    ///
    /// ``StreamSession`` feeds it every message and carries out the ``Action``s. A segment whose
    /// bytes match its header is then judged by its MP4 (``judge(_:video:agent:)``, a ``Verdict``),
    /// and the usage rules decide what the ledger's answer means for the car
    /// (``mayCharge(remaining:)``, ``answer(_:)``); the session only carries them out.
    public struct StateMachine: Sendable {
        public struct Limits: Sendable, Equatable {
            /// Largest segment (`bytes`) accepted; `server.maxSegmentBytes`.
            public var maxSegmentBytes: Int
            /// Longest stream id remembered; a longer one is ignored (as if the hello had none).
            public var maxStreamLength = 128
            /// Longest `video.segmentMs` a `hello` may announce: segments last a minute at most, so ten
            /// leave a wide margin.
            public var maxSegmentMs = 10 * 60 * 1000
            /// Largest clip file (`clip` `files[].bytes`) accepted; `clips.maxFileMegabytes`.
            public var maxClipFileBytes = 64 * 1024 * 1024

            public init(maxSegmentBytes: Int) { self.maxSegmentBytes = maxSegmentBytes }
        }

        /// What the agent said in its `hello` that segments need.
        public struct Agent: Sendable, Equatable {
            public var locale: String
            public var agent: String
            /// The agent's per-start stream id; `nil`: re-sent segments are not recognised.
            public var stream: String?
            /// The segment length it records; a segment may last up to twice that.
            public var segmentMs: Int
            /// The device id it names itself by (`uplink.deviceId`): a label only, the tokens file
            /// decides which device a session is.
            public var named: String = ""
        }

        /// A segment whose size, chunk count and SHA-256 match its header.
        public struct Verified: Sendable, Equatable {
            public var header: ClientMessage.SegmentHeader
            public var data: Data
            /// Lower-case hex SHA-256 of `data`.
            public var sha256: String
            /// `durationMs` rounded up to whole seconds; once the MP4 is read (``judge(_:video:agent:)``),
            /// its own duration rounded up: what the segment costs.
            public var seconds: Int
        }

        /// Codecs a segment's video may be in: the agent records HEVC; H.264 is what boards with
        /// only an H.264 encoder send.
        public static let codecs: Set<String> = ["hevc", "h264"]

        public enum Action: Sendable, Equatable {
            /// A valid `hello`: take the device's lease and answer `welcome`.
            case open(Agent)
            /// Tell the agent about something it sent wrong; the session goes on.
            case reject(ServerMessage.ErrorCode, String, seq: Int?, reason: Rejection)
            /// Close the session: a protocol error before `hello`.
            case close(reason: String)
            /// A segment's header was accepted and its `bytes` come next, in chunks: room for them
            /// is taken (``InFlightBudget``) before another message is read. The room is given back
            /// once ``isReceivingSegment`` is false again.
            case expect(bytes: Int)
            /// A segment whose size and SHA-256 match its header: its MP4 is read next, and
            /// ``judge(_:video:agent:)`` says whether it is taken.
            case inspect(Verified)
            /// Worth a debug log line, nothing more (an unknown message type).
            case ignore(String)
            /// A new access token for this session (`auth`): the session checks it names its device.
            case renewAuth(String)
            /// A valid `incident`: keep the segments it names.
            case keepIncident(ClientMessage.Incident)
            /// A valid `clip`: say how much of each file is held (the clip store decides).
            case announceClip(ClientMessage.Clip)
            /// A `clip_part` and its bytes, exactly as many as it announced: the clip store appends
            /// them if `offset` is what it holds.
            case clipPart(ClientMessage.ClipPart, Data)
        }

        /// Why a message was refused, as a metric label: a closed set.
        public enum Rejection: String, Sendable, CaseIterable {
            case unreadable, outOfOrder = "out_of_order", seq, duration, frames, bytes, sha256Format = "sha256_format"
            case chunks, overrun, incomplete, size, digest
            /// The bytes are not one MP4 with one HEVC or H.264 video track.
            case video
            /// A `clip` or `clip_part` that breaks a rule, or a part's bytes that are not what it said.
            case clip
        }

        private struct Receiving: Sendable {
            var header: ClientMessage.SegmentHeader
            var chunks: Int
            var received = 0
            var data = Data()
        }

        private enum State: Sendable {
            case awaitingHello
            case ready(Agent)
            case receiving(Agent, Receiving)
            /// A `clip_part` was accepted: its one binary message is next.
            case receivingClipPart(Agent, ClientMessage.ClipPart)
            /// A header was refused: its chunks are dropped, unread, until the next text message.
            case skipping(Agent)
            case closed
        }

        /// Bytes per binary chunk (the last may be shorter).
        public static let chunkBytes = GuidanceProtocol.maxMessageBytes

        public let limits: Limits
        private var state = State.awaitingHello

        public init(limits: Limits) { self.limits = limits }

        /// The `hello` has been accepted.
        public var isOpen: Bool {
            switch state {
            case .ready, .receiving, .receivingClipPart, .skipping: true
            case .awaitingHello, .closed: false
            }
        }

        /// What the `hello` said, once accepted.
        public var agent: Agent? {
            switch state {
            case .ready(let agent), .receiving(let agent, _), .receivingClipPart(let agent, _), .skipping(let agent): agent
            case .awaitingHello, .closed: nil
            }
        }

        /// A segment's header was accepted and not all of its chunks have come.
        public var isReceivingSegment: Bool {
            if case .receiving = state { return true }
            return false
        }

        /// Bytes held for the segment being received.
        public var bufferedBytes: Int {
            if case .receiving(_, let receiving) = state { return receiving.data.count }
            return 0
        }

        // MARK: - Text

        public mutating func text(_ text: String) -> [Action] {
            switch state {
            case .closed:
                return []
            case .awaitingHello:
                return hello(text)
            case .ready(let agent), .skipping(let agent):
                state = .ready(agent)
                return message(text, agent: agent)
            case .receiving(let agent, let receiving):
                // The text starts something new: the segment before it is incomplete.
                state = .ready(agent)
                let missing = Action.reject(
                    .badSegment, "got \(receiving.received) of \(receiving.chunks) chunks before the next message",
                    seq: receiving.header.seq, reason: .incomplete)
                return [missing] + message(text, agent: agent)
            case .receivingClipPart(let agent, let part):
                state = .ready(agent)
                let missing = Action.reject(
                    .badClip, "clip \(part.id) file \(part.name): no bytes before the next message", seq: nil, reason: .clip)
                return [missing] + message(text, agent: agent)
            }
        }

        private mutating func hello(_ text: String) -> [Action] {
            guard case .hello(let hello) = try? ClientMessage.decode(text) else {
                return close("first message must be hello")
            }
            guard hello.protocol == GuidanceProtocol.version else {
                return close("protocol \(hello.protocol) is not supported; this server speaks \(GuidanceProtocol.version)")
            }
            guard (1...limits.maxSegmentMs).contains(hello.video.segmentMs) else {
                return close("video.segmentMs \(hello.video.segmentMs) is not within 1…\(limits.maxSegmentMs)")
            }
            // The locale names the language of every answer (and goes into a model's prompt): a
            // language tag, nothing else.
            guard (1...35).contains(hello.locale.utf8.count),
                hello.locale.utf8.allSatisfy({ $0.isLetterOrDigit || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") })
            else {
                return close("locale \(GuidanceText.loggable(hello.locale)) is not a language tag (BCP 47, like en-US)")
            }
            var actions: [Action] = []
            var stream = hello.stream
            if let given = stream, given.isEmpty || given.utf8.count > limits.maxStreamLength {
                actions.append(
                    .ignore("a stream id that is empty or over \(limits.maxStreamLength) bytes; re-sent segments will be analysed again"))
                stream = nil
            }
            let agent = Agent(
                locale: hello.locale, agent: hello.agent, stream: stream, segmentMs: hello.video.segmentMs, named: hello.device)
            state = .ready(agent)
            return actions + [.open(agent)]
        }

        private mutating func close(_ reason: String) -> [Action] {
            state = .closed
            return [.close(reason: reason)]
        }

        /// A text message after `hello`, in state `.ready`.
        private mutating func message(_ text: String, agent: Agent) -> [Action] {
            let decoded: ClientMessage
            do {
                decoded = try ClientMessage.decode(text)
            } catch {
                return [.reject(.badMessage, "unreadable message: \(error)", seq: nil, reason: .unreadable)]
            }
            switch decoded {
            case .hello:
                return [.reject(.badMessage, "hello was already received", seq: nil, reason: .outOfOrder)]
            case .unknown(let type):
                return [.ignore("message of unknown type \(GuidanceText.loggable(type))")]
            case .auth(let auth):
                guard (1...AccessTokens.maxLength).contains(auth.token.utf8.count) else {
                    return [
                        .reject(.badMessage, "an auth token must be 1 to \(AccessTokens.maxLength) bytes", seq: nil, reason: .unreadable)
                    ]
                }
                return [.renewAuth(auth.token)]
            case .incident(let incident):
                if let problem = incident.problem { return [.reject(.badMessage, problem, seq: nil, reason: .unreadable)] }
                return [.keepIncident(incident)]
            case .clip(var clip):
                if let problem = clip.problem(maxFileBytes: limits.maxClipFileBytes) {
                    return [.reject(.badClip, problem, seq: nil, reason: .clip)]
                }
                var actions: [Action] = []
                if clip.gps != nil, clip.validGPS == nil {
                    clip.gps = nil
                    actions.append(
                        .ignore("clip \(clip.id)'s gps track: more than \(ClientMessage.Clip.maxPositions) points or a value out of range"))
                }
                return actions + [.announceClip(clip)]
            case .clipPart(let part):
                if let problem = part.problem(maxFileBytes: limits.maxClipFileBytes) {
                    // Its bytes are dropped, unread.
                    state = .skipping(agent)
                    return [.reject(.badClip, problem, seq: nil, reason: .clip)]
                }
                state = .receivingClipPart(agent, part)
                return []
            case .segment(var header):
                if let (reason, problem) = check(header, agent: agent) {
                    // Whatever chunks it announced are dropped, unread.
                    if header.chunks != nil { state = .skipping(agent) }
                    return [.reject(.badSegment, problem, seq: header.seq >= 0 ? header.seq : nil, reason: reason)]
                }
                // A GPS track out of range is left out (nothing is computed from it); the video
                // is what the segment is for.
                var actions: [Action] = []
                if let gps = header.gps, gps.count > ClientMessage.SegmentHeader.maxPositions || !gps.allSatisfy(\.isValid) {
                    header.gps = nil
                    actions.append(
                        .ignore(
                            "segment \(header.seq)'s gps track: more than \(ClientMessage.SegmentHeader.maxPositions) points or a value out of range"
                        ))
                }
                // `check` made sure that `chunks` is there and matches `bytes`.
                state = .receiving(agent, Receiving(header: header, chunks: header.chunks ?? 0))
                return actions + [.expect(bytes: header.bytes)]
            }
        }

        /// Why a header cannot be accepted, or `nil`. Every field a client sends is in range before
        /// anything is computed from it.
        func check(_ header: ClientMessage.SegmentHeader, agent: Agent) -> (Rejection, String)? {
            guard header.seq >= 0 else { return (.seq, "seq \(header.seq) is negative") }
            // segmentMs ≤ maxSegmentMs (checked at hello): twice it cannot overflow.
            let longest = 2 * agent.segmentMs
            guard header.durationMs > 0, header.durationMs <= longest else {
                return (.duration, "durationMs \(header.durationMs) is not within 1…\(longest) (twice the hello's segmentMs)")
            }
            guard header.frames >= 0 else { return (.frames, "frames \(header.frames) is negative") }
            guard header.bytes > 0, header.bytes <= limits.maxSegmentBytes else {
                return (.bytes, "bytes \(header.bytes) is not within 1…\(limits.maxSegmentBytes)")
            }
            guard header.sha256.utf8.count == 64, header.sha256.utf8.allSatisfy({ $0.isHexDigit }) else {
                return (.sha256Format, "sha256 is not 64 hex digits")
            }
            switch header.chunks {
            case nil:
                return (.chunks, "a segment needs chunks: its MP4 follows the header as binary messages")
            case .some(let chunks):
                // bytes ≤ maxSegmentBytes: no overflow.
                let expected = (header.bytes + Self.chunkBytes - 1) / Self.chunkBytes
                guard chunks == expected else {
                    return (
                        .chunks,
                        "chunks \(chunks) does not match bytes \(header.bytes) (expected \(expected) of up to \(Self.chunkBytes) bytes)"
                    )
                }
                return nil
            }
        }

        // MARK: - The segment's own MP4

        /// A verified segment against what its MP4 says of itself (`video`, or `nil` when it is not an
        /// MP4 that can be read): one track, of video, in a codec the server takes, with as many
        /// frames as the header says and about as long. The charge is the file's duration, never the
        /// header's; the header only has to agree with it.
        public func judge(_ segment: Verified, video: SegmentVideo.Info?, agent: Agent) -> Verdict {
            let header = segment.header
            func refuse(_ reason: Rejection, _ text: String) -> Verdict {
                .refuse(text, seq: header.seq, reason: reason)
            }
            guard let video else { return refuse(.video, "not an MP4 segment that can be read") }
            guard video.streams == 1, video.videoStreams == 1 else {
                return refuse(
                    .video, "the MP4 has \(video.streams) tracks, \(video.videoStreams) of them video; a segment has one video track")
            }
            guard Self.codecs.contains(video.codec) else {
                return refuse(
                    .video,
                    "the video is \(video.codec.isEmpty ? "of no known codec" : GuidanceText.loggable(video.codec, limit: 32)); segments are HEVC or H.264"
                )
            }
            guard video.frames > 0, header.frames == video.frames else {
                return refuse(.frames, "frames \(header.frames) does not match the MP4's \(video.frames)")
            }
            // Both are checked before the difference: header within 1…2 × segmentMs (check), the file's here.
            let longest = 2 * agent.segmentMs
            guard video.durationMs > 0, video.durationMs <= longest else {
                return refuse(.duration, "the MP4 lasts \(video.durationMs) ms, not within 1…\(longest)")
            }
            let slack = max(Self.durationSlackMs, header.durationMs / 10)
            guard abs(video.durationMs - header.durationMs) <= slack else {
                return refuse(.duration, "durationMs \(header.durationMs) does not match the MP4's \(video.durationMs) (± \(slack))")
            }
            var charged = segment
            charged.seconds = video.durationMs / 1000 + (video.durationMs % 1000 == 0 ? 0 : 1)
            return .take(charged)
        }

        /// What the MP4 check decides of a segment.
        public enum Verdict: Sendable, Equatable {
            /// Taken: it is charged `seconds`, the MP4's own duration rounded up.
            case take(Verified)
            /// Refused (`bad_segment`); the session goes on.
            case refuse(String, seq: Int, reason: Rejection)
        }

        /// Whether a taken segment may be charged, given the device's usage left (`nil`: unlimited).
        /// None left: it is not acknowledged (the agent keeps it until usage returns), and the
        /// session ends with `quota_exhausted`.
        public static func mayCharge(remaining: Int?) -> Bool { remaining != 0 }

        /// What the ledger said of a charge.
        public enum LedgerAnswer: Sendable, Equatable {
            /// Charged now; `remaining` is the usage left after it (`nil`: unlimited).
            case charged(remaining: Int?)
            /// The same segment (device, stream, seq) was charged before, with these bytes or not.
            case chargedBefore(sameBytes: Bool)
            /// The device's lease went to a newer session (here or at another instance).
            case fenced
            /// The ledger could not be reached or failed.
            case failed
        }

        /// What the car is told, and whether the session goes on, after the ledger's answer.
        public enum ChargeOutcome: Sendable, Equatable {
            /// `ack`; with usage limited, then `usage` with what is left, and at 0 `quota_exhausted`
            /// and the session ends (`endsSession`).
            case acknowledge(usageLeft: Int?, endsSession: Bool)
            /// Its ack was lost with an earlier connection: `ack` again, and only that.
            case acknowledgeAgain
            /// Delivered before with other content: `bad_segment`; the session goes on.
            case refuseOtherContent
            /// Another session holds the device now: no answer, the session ends (4000).
            case superseded
            /// Not acknowledged, so the agent keeps it and sends it again: `internal`, and the
            /// session ends (1011).
            case ledgerUnavailable
        }

        public static func answer(_ ledger: LedgerAnswer) -> ChargeOutcome {
            switch ledger {
            case .charged(let remaining): .acknowledge(usageLeft: remaining, endsSession: remaining == 0)
            case .chargedBefore(sameBytes: true): .acknowledgeAgain
            case .chargedBefore(sameBytes: false): .refuseOtherContent
            case .fenced: .superseded
            case .failed: .ledgerUnavailable
            }
        }

        /// How far a header's `durationMs` may be from the MP4's (at least; or a tenth of it): the
        /// agent counts from capture timestamps, the muxer from the track's.
        public static let durationSlackMs = 500

        // MARK: - Binary

        public mutating func binary(_ bytes: some Collection<UInt8>) -> [Action] {
            switch state {
            case .closed, .skipping:
                return []
            case .awaitingHello:
                return close("first message must be hello")
            case .ready:
                return [.reject(.badMessage, "binary data without a segment header", seq: nil, reason: .outOfOrder)]
            case .receivingClipPart(let agent, let part):
                // One binary message per part, exactly as long as it said.
                guard bytes.count == part.bytes else {
                    state = .skipping(agent)
                    return [
                        .reject(
                            .badClip, "clip \(part.id) file \(part.name): \(bytes.count) bytes, the part said \(part.bytes)", seq: nil,
                            reason: .clip)
                    ]
                }
                state = .ready(agent)
                return [.clipPart(part, Data(bytes))]
            case .receiving(let agent, var receiving):
                // Out of `state` first, so the buffer has one owner and appending does not copy it.
                state = .ready(agent)
                guard bytes.count <= Self.chunkBytes, receiving.data.count + bytes.count <= receiving.header.bytes else {
                    state = .skipping(agent)
                    return [
                        .reject(
                            .badSegment, "more bytes than the header's \(receiving.header.bytes)", seq: receiving.header.seq,
                            reason: .overrun)
                    ]
                }
                if receiving.data.isEmpty {
                    // Grows as chunks arrive; never more than one chunk ahead of what was received.
                    receiving.data.reserveCapacity(min(receiving.header.bytes, Self.chunkBytes))
                }
                receiving.data.append(contentsOf: bytes)
                receiving.received += 1
                guard receiving.received == receiving.chunks else {
                    state = .receiving(agent, receiving)
                    return []
                }
                return [complete(receiving.header, data: receiving.data, agent: agent)]
            }
        }

        /// Lower-case hex of `digest`, without a format string per byte.
        static func hex(_ digest: some Sequence<UInt8>) -> String {
            let digits = Array("0123456789abcdef".utf8)
            var text = [UInt8]()
            text.reserveCapacity(64)
            for byte in digest {
                text.append(digits[Int(byte >> 4)])
                text.append(digits[Int(byte & 0x0f)])
            }
            return String(decoding: text, as: UTF8.self)
        }

        private func complete(_ header: ClientMessage.SegmentHeader, data: Data, agent: Agent) -> Action {
            guard data.count == header.bytes else {
                return .reject(.badSegment, "received \(data.count) bytes, header says \(header.bytes)", seq: header.seq, reason: .size)
            }
            let digest = Self.hex(SHA256.hash(data: data))
            guard digest == header.sha256.lowercased() else {
                return .reject(.badSegment, "SHA-256 does not match", seq: header.seq, reason: .digest)
            }
            // durationMs is within 1…2 × segmentMs: rounding up cannot overflow.
            let seconds = header.durationMs / 1000 + (header.durationMs % 1000 == 0 ? 0 : 1)
            return .inspect(Verified(header: header, data: data, sha256: digest, seconds: seconds))
        }
    }
}

extension UInt8 {
    fileprivate var isLetterOrDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
    }

    fileprivate var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
