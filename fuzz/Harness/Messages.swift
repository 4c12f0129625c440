import Crypto
import Foundation
import GuidanceProtocol
import GuidanceServer

/// A session's messages, text and binary, through one ``StreamSession/StateMachine``: from `hello`
/// through segment headers and their chunks to verified segments, each then judged against what
/// its MP4 says (``SegmentVideo/inspect(_:)``), and every way off that path.
///
/// An input is byte 0, which picks the server's `maxSegmentBytes` from ``sizes``, then records up
/// to its end, each a kind byte (its low two bits) and what that kind takes:
///
/// - 0 text: a length (2 bytes, little-endian) and that many bytes, sent as a text message
///   (as UTF-8; a bad sequence reads as U+FFFD, as a `String` made from the frame would);
/// - 1 binary: a length (2 bytes) and that many bytes, sent as a binary message;
/// - 2 header: like text, with `$SHA`, `$LEN`, `$CHUNKS` and `$B64` replaced by the SHA-256 (hex),
///   size, chunk count and base64 of its payload: the binary messages after it, up to the next text.
///   So a fuzzer that cannot invert SHA-256 still reaches verified segments;
/// - 3 filler: a length (3 bytes, taken modulo 2 × 64 KiB + 1) and one byte, sent as a binary
///   message of that many of it: full chunks without 64 KiB of input.
///
/// A record cut short by the input's end takes what is there.
enum Messages {
    static let sizes = [1, 100, 4096, 65_535, 65_536, 65_537, 200_000]
    static let chunk = StreamSession.StateMachine.chunkBytes
    /// `GUIDANCE_FUZZ_TRACE=1`: each message and what the machine made of it, on stderr.
    static let trace = ProcessInfo.processInfo.environment["GUIDANCE_FUZZ_TRACE"] == "1"

    enum Message {
        case text(String)
        case binary([UInt8])
    }

    static func run(_ input: UnsafeRawBufferPointer) {
        guard let selector = input.first else { return }
        let limits = StreamSession.StateMachine.Limits(maxSegmentBytes: sizes[Int(selector) % sizes.count])
        var machine = StreamSession.StateMachine(limits: limits)
        var opened: StreamSession.StateMachine.Agent?
        var closed = false
        var binariesSinceText = 0

        for message in messages(input.dropFirst()) {
            let wasOpen = machine.isOpen
            let actions: [StreamSession.StateMachine.Action]
            switch message {
            case .text(let text):
                roundTrip(text)
                binariesSinceText = 0
                actions = machine.text(text)
            case .binary(let bytes):
                binariesSinceText += 1
                actions = machine.binary(bytes)
                if !wasOpen && !closed {
                    require(actions == [.close(reason: "first message must be hello")], "binary before hello: \(actions)")
                }
            }

            if trace {
                let shown =
                    switch message {
                    case .text(let text): "text \(text.prefix(200))"
                    case .binary(let bytes): "binary \(bytes.count) bytes"
                    }
                FileHandle.standardError.write(Data("\(shown)\n  -> \(actions.map { "\($0)".prefix(200) })\n".utf8))
            }
            require(
                machine.bufferedBytes >= 0 && machine.bufferedBytes <= limits.maxSegmentBytes,
                "buffered \(machine.bufferedBytes) bytes, limit \(limits.maxSegmentBytes)")
            if closed {
                require(actions.isEmpty && !machine.isOpen, "a closed session acted: \(actions)")
                continue
            }
            if wasOpen { require(machine.isOpen && machine.agent == opened, "an open session changed its agent or closed") }

            for action in actions {
                // What the session logs and sends back carries a client's strings escaped: no
                // control character (a newline would start a forged log line), no format character.
                let said: String? =
                    switch action {
                    case .close(let reason): reason
                    case .reject(_, let text, _, _): text
                    case .ignore(let text): text
                    case .open, .expect, .inspect, .renewAuth, .keepIncident, .announceClip, .clipPart: nil
                    }
                if let said {
                    require(
                        !said.unicodeScalars.contains { [.control, .format].contains($0.properties.generalCategory) },
                        "a control or format character in \(said.debugDescription)")
                }
                switch action {
                case .keepIncident(let incident):
                    // Its id names a folder of the server's: one path component, of few characters.
                    require(wasOpen && incident.problem == nil, "an incident kept before hello, or with a problem: \(incident)")
                    require(
                        !incident.id.isEmpty && incident.id.utf8.count <= ClientMessage.Incident.maxIDLength
                            && incident.id.unicodeScalars.allSatisfy {
                                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
                            },
                        "incident id \(incident.id.debugDescription)")
                    require(
                        incident.seqs.count <= ClientMessage.Incident.maxSeqs && incident.peakG.isFinite, "incident bounds: \(incident)")
                case .announceClip(let clip):
                    // Its id and file names become a folder and files of the server's: one path
                    // component each, never `.` or `..`; every number checked.
                    require(
                        wasOpen && clip.problem(maxFileBytes: limits.maxClipFileBytes) == nil,
                        "a clip announced before hello, or with a problem: \(clip)")
                    require(
                        isPathComponent(clip.id) && clip.files.allSatisfy { isPathComponent($0.name) },
                        "clip names \(clip.id.debugDescription)")
                    require(clip.gps == nil || clip.validGPS != nil, "a clip's gps track out of range kept")
                case .clipPart(let part, let data):
                    require(
                        wasOpen && part.problem(maxFileBytes: limits.maxClipFileBytes) == nil,
                        "a clip part before hello, or with a problem: \(part)")
                    require(
                        data.count == part.bytes && binariesSinceText == 1,
                        "a part of \(part.bytes) bytes carried \(data.count), after \(binariesSinceText) binary messages")
                    require(isPathComponent(part.id) && isPathComponent(part.name), "clip part names \(part.name.debugDescription)")
                case .renewAuth(let token):
                    require(
                        wasOpen && (1...AccessTokens.maxLength).contains(token.utf8.count),
                        "an auth token of \(token.utf8.count) bytes, or before hello")
                case .close:
                    require(!wasOpen && actions.count == 1, "close after hello, or with more: \(actions)")
                    require(!machine.isOpen && machine.agent == nil, "closed, yet open")
                    closed = true
                case .open(let agent):
                    require(!wasOpen && opened == nil, "a second open")
                    require((1...limits.maxSegmentMs).contains(agent.segmentMs), "segmentMs \(agent.segmentMs)")
                    require(
                        (1...35).contains(agent.locale.utf8.count)
                            && agent.locale.unicodeScalars.allSatisfy {
                                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_")
                            },
                        "locale \(agent.locale.debugDescription) is not a language tag")
                    if let stream = agent.stream {
                        require(!stream.isEmpty && stream.utf8.count <= limits.maxStreamLength, "stream id of \(stream.utf8.count) bytes")
                    }
                    require(machine.isOpen && machine.agent == agent, "opened, yet not open")
                    opened = agent
                case .reject(_, _, let seq, _):
                    require(wasOpen, "a reject before hello")
                    require(seq.map { $0 >= 0 } ?? true, "reject names seq \(seq!)")
                case .inspect(let segment):
                    require(wasOpen, "verified before hello")
                    check(segment, limits: limits, agent: opened!, binaries: binariesSinceText)
                    judge(segment, machine: machine, agent: opened!)
                    require(machine.bufferedBytes == 0, "a verified segment left \(machine.bufferedBytes) bytes buffered")
                case .expect(let bytes):
                    // The room a session takes before it reads on: never more than a segment may be.
                    require(
                        wasOpen && (1...limits.maxSegmentBytes).contains(bytes) && machine.isReceivingSegment,
                        "room for \(bytes) bytes asked, limit \(limits.maxSegmentBytes)")
                case .ignore:
                    break
                }
            }
        }
    }

    /// One file or folder name of printable ASCII, without `/`, not `.` or `..` or hidden.
    static func isPathComponent(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && name.utf8.count <= 128
            && name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
            }
    }

    static func check(
        _ segment: StreamSession.StateMachine.Verified, limits: StreamSession.StateMachine.Limits,
        agent: StreamSession.StateMachine.Agent, binaries: Int
    ) {
        let header = segment.header
        require(segment.data.count == header.bytes, "verified \(segment.data.count) bytes, header says \(header.bytes)")
        require((1...limits.maxSegmentBytes).contains(header.bytes), "verified bytes \(header.bytes) over the limit")
        require(segment.sha256 == hex(SHA256.hash(data: segment.data)), "sha256 is not the data's")
        require(segment.sha256 == header.sha256.lowercased(), "sha256 is not the header's")
        require(header.seq >= 0 && header.frames >= 0, "negative seq or frames")
        require((1...2 * agent.segmentMs).contains(header.durationMs), "durationMs \(header.durationMs)")
        require(
            segment.seconds >= 1 && segment.seconds * 1000 >= header.durationMs && (segment.seconds - 1) * 1000 < header.durationMs,
            "\(segment.seconds) s for \(header.durationMs) ms")
        require(
            header.chunks == (header.bytes + chunk - 1) / chunk && header.chunks == binaries,
            "\(String(describing: header.chunks)) chunks for \(header.bytes) bytes, \(binaries) binary messages")
    }

    /// What the session does next with a verified segment: its MP4 read (``SegmentVideo/inspect(_:)``)
    /// and judged against the header; the charge is then the file's duration.
    static func judge(
        _ segment: StreamSession.StateMachine.Verified, machine: StreamSession.StateMachine,
        agent: StreamSession.StateMachine.Agent
    ) {
        let video = try? SegmentVideo.inspect(segment.data)
        let header = segment.header
        let judged = machine.judge(segment, video: video, agent: agent)
        if trace { FileHandle.standardError.write(Data("  judged: \("\(judged)".prefix(200))\n".utf8)) }
        switch judged {
        case .take(let charged):
            guard let video else { return require(false, "judged an unreadable segment verified") }
            require(
                charged.header == header && charged.data == segment.data && charged.sha256 == segment.sha256, "judging changed the segment")
            require(
                video.streams == 1 && video.videoStreams == 1 && StreamSession.StateMachine.codecs.contains(video.codec),
                "verified \(video)")
            require(video.frames > 0 && video.frames == header.frames, "verified \(header.frames) frames, the MP4 has \(video.frames)")
            require((1...2 * agent.segmentMs).contains(video.durationMs), "verified an MP4 of \(video.durationMs) ms")
            require(
                abs(video.durationMs - header.durationMs) <= max(StreamSession.StateMachine.durationSlackMs, header.durationMs / 10),
                "verified \(header.durationMs) ms against the MP4's \(video.durationMs)")
            require(
                charged.seconds >= 1 && charged.seconds * 1000 >= video.durationMs && (charged.seconds - 1) * 1000 < video.durationMs,
                "charged \(charged.seconds) s for \(video.durationMs) ms")
        case .refuse(_, let seq, let reason):
            require(seq == header.seq && [.video, .frames, .duration].contains(reason), "judged \(reason)")
        }
    }

    /// A message that reads as `hello` or a segment header reads the same once written again.
    static func roundTrip(_ text: String) {
        guard let message = try? ClientMessage.decode(text) else { return }
        if case .unknown = message { return }
        let again = try? ClientMessage.decode(message.encoded())
        require(again == message, "\(message) read back as \(String(describing: again))")
    }

    // MARK: - Records

    static func messages(_ input: Slice<UnsafeRawBufferPointer>) -> [Message] {
        enum Record {
            case text([UInt8], template: Bool)
            case binary([UInt8])
        }
        var records: [Record] = []
        var rest = input[...]
        func take(_ count: Int) -> ArraySlice<UInt8> {
            let taken = Array(rest.prefix(count))[...]
            rest = rest.dropFirst(taken.count)
            return taken
        }
        func number(_ bytes: Int) -> Int {
            take(bytes).reversed().reduce(0) { $0 << 8 | Int($1) }
        }
        while let kind = rest.first {
            rest = rest.dropFirst()
            switch kind & 3 {
            case 0, 2: records.append(.text(Array(take(number(2))), template: kind & 3 == 2))
            case 1: records.append(.binary(Array(take(number(2)))))
            default:
                let count = number(3) % (2 * chunk + 1)
                records.append(.binary([UInt8](repeating: take(1).first ?? 0, count: count)))
            }
        }
        return (0..<records.count).map { i in
            switch records[i] {
            case .binary(let bytes): return .binary(bytes)
            case .text(let bytes, let template):
                let text = String(decoding: bytes, as: UTF8.self)
                guard template else { return .text(text) }
                var payload: [UInt8] = []
                for case .binary(let bytes) in records[(i + 1)...].prefix(while: { if case .binary = $0 { true } else { false } }) {
                    payload += bytes
                }
                return .text(
                    text
                        .replacingOccurrences(of: "$SHA", with: hex(SHA256.hash(data: payload)))
                        .replacingOccurrences(of: "$LEN", with: "\(payload.count)")
                        .replacingOccurrences(of: "$CHUNKS", with: "\((payload.count + chunk - 1) / chunk)")
                        .replacingOccurrences(of: "$B64", with: Data(payload).base64EncodedString()))
            }
        }
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}
