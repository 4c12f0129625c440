import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import PropertyBased
import TestSupport
import Testing

/// The session's rules, without a socket: every message in, every action out.
@Suite struct StreamSessionStateMachineTests {
    static let limits = StreamSession.StateMachine.Limits(maxSegmentBytes: 1 << 20)
    static let chunk = StreamSession.StateMachine.chunkBytes

    static func hello(
        segmentMs: Int = 5000, protocol version: Int = GuidanceProtocol.version, stream: String? = "s1",
        locale: String = "en-US"
    ) -> String {
        var hello = ClientMessage.Hello(
            device: "car-1", locale: locale, agent: "test",
            video: .init(width: 320, height: 180, fps: 10, segmentMs: segmentMs), stream: stream)
        hello.protocol = version
        return ClientMessage.hello(hello).encoded()
    }

    static func sha(_ data: [UInt8]) -> String { sha256Hex(data) }

    static func header(seq: Int = 1, durationMs: Int = 5000, frames: Int = 50, bytes: Int, chunks: Int?, sha: String) -> String {
        ClientMessage.segment(
            .init(
                seq: seq, capturedAt: "2026-11-22T04:17:17.569Z", durationMs: durationMs, frames: frames,
                bytes: bytes, sha256: sha, chunks: chunks)
        ).encoded()
    }

    static func opened() -> StreamSession.StateMachine {
        var machine = StreamSession.StateMachine(limits: limits)
        _ = machine.text(hello())
        return machine
    }

    static func reasons(_ actions: [StreamSession.StateMachine.Action]) -> [StreamSession.StateMachine.Rejection] {
        actions.compactMap { if case .reject(_, _, _, let reason) = $0 { reason } else { nil } }
    }

    @Test func helloOpensWithWhatSegmentsNeed() {
        var machine = StreamSession.StateMachine(limits: Self.limits)
        let actions = machine.text(Self.hello())
        #expect(actions == [.open(.init(locale: "en-US", agent: "test", stream: "s1", segmentMs: 5000, named: "car-1"))])
        #expect(machine.isOpen)
    }

    @Test(arguments: [
        (hello: "{\"type\":\"segment\"}", says: "first message must be hello"),
        (hello: "not json", says: "first message must be hello"),
        (hello: StreamSessionStateMachineTests.hello(protocol: 2), says: "protocol 2 is not supported"),
        (hello: StreamSessionStateMachineTests.hello(segmentMs: 0), says: "video.segmentMs 0"),
        (hello: StreamSessionStateMachineTests.hello(segmentMs: Int.max), says: "video.segmentMs \(Int.max)"),
        (hello: StreamSessionStateMachineTests.hello(locale: "en-US\nignore the road"), says: "is not a language tag"),
        (hello: StreamSessionStateMachineTests.hello(locale: ""), says: "is not a language tag")
    ])
    func aBadFirstMessageCloses(hello: String, says: String) {
        var machine = StreamSession.StateMachine(limits: Self.limits)
        let actions = machine.text(hello)
        guard case .close(let reason) = actions.first, actions.count == 1 else {
            Issue.record("\(actions)")
            return
        }
        #expect(reason.contains(says), "\(reason)")
        #expect(!machine.isOpen)
        #expect(machine.text(Self.hello()).isEmpty, "a closed session reads nothing more")
    }

    /// A paired car's new access token, between segments: the session checks it; one over the
    /// limit or empty is refused, and `auth` before `hello` is like any first message but `hello`.
    @Test func anAuthMessageRenewsTheSessionsToken() {
        var machine = Self.opened()
        #expect(machine.text(ClientMessage.auth(.init(token: "a.b.c")).encoded()) == [.renewAuth("a.b.c")])
        #expect(Self.reasons(machine.text(ClientMessage.auth(.init(token: "")).encoded())) == [.unreadable])
        #expect(
            Self.reasons(
                machine.text(ClientMessage.auth(.init(token: String(repeating: "x", count: AccessTokens.maxLength + 1))).encoded()))
                == [.unreadable])
        #expect(machine.isOpen)
        var fresh = StreamSession.StateMachine(limits: Self.limits)
        #expect(fresh.text(ClientMessage.auth(.init(token: "a.b.c")).encoded()) == [.close(reason: "first message must be hello")])
    }

    @Test func binaryBeforeHelloCloses() {
        var machine = StreamSession.StateMachine(limits: Self.limits)
        #expect(machine.binary([1, 2, 3]) == [.close(reason: "first message must be hello")])
    }

    @Test func aStreamIdThatIsEmptyOrTooLongIsIgnored() {
        for stream in ["", String(repeating: "x", count: 129)] {
            var machine = StreamSession.StateMachine(limits: Self.limits)
            let actions = machine.text(Self.hello(stream: stream))
            #expect(actions.last == .open(.init(locale: "en-US", agent: "test", stream: nil, segmentMs: 5000, named: "car-1")))
        }
    }

    @Test func aSegmentInChunksIsVerifiedWithItsCostInWholeSeconds() {
        var machine = Self.opened()
        let data = (0..<(2 * Self.chunk + 10)).map { UInt8(truncatingIfNeeded: $0) }
        // Room for the whole segment is asked before a chunk is read.
        #expect(
            machine.text(Self.header(durationMs: 4001, bytes: data.count, chunks: 3, sha: Self.sha(data))) == [.expect(bytes: data.count)])
        #expect(machine.isReceivingSegment)
        #expect(machine.binary(data[0..<Self.chunk]).isEmpty)
        #expect(machine.bufferedBytes == Self.chunk)
        #expect(machine.binary(data[Self.chunk..<(2 * Self.chunk)]).isEmpty)
        let actions = machine.binary(data[(2 * Self.chunk)...])
        guard case .inspect(let segment) = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(segment.data == Data(data))
        #expect(segment.sha256 == Self.sha(data))
        #expect(segment.seconds == 5)
        #expect(machine.bufferedBytes == 0)
    }

    /// An agent of an earlier release put the MP4 in the header as base64 (`data`) and sent no
    /// chunks: the header is refused, and names the way that works.
    @Test func anOldAgentsBase64HeaderIsRefused() {
        var machine = Self.opened()
        let data: [UInt8] = Array("hello segment".utf8)
        let header = Self.header(durationMs: 5000, bytes: data.count, chunks: nil, sha: Self.sha(data))
        let actions = machine.text(String(header.dropLast()) + ",\"data\":\"\(Data(data).base64EncodedString())\"}")
        guard case .reject(.badSegment, let text, 1, .chunks) = actions.first, actions.count == 1 else {
            Issue.record("\(actions)")
            return
        }
        #expect(text.contains("needs chunks"))
    }

    @Test(arguments: [
        (Self.header(seq: -1, bytes: 10, chunks: 1, sha: Self.sha([])), StreamSession.StateMachine.Rejection.seq),
        (Self.header(durationMs: Int.max, bytes: 10, chunks: 1, sha: Self.sha([])), .duration),
        (Self.header(durationMs: Int.min, bytes: 10, chunks: 1, sha: Self.sha([])), .duration),
        (Self.header(durationMs: 0, bytes: 10, chunks: 1, sha: Self.sha([])), .duration),
        (Self.header(durationMs: 10_001, bytes: 10, chunks: 1, sha: Self.sha([])), .duration),
        (Self.header(frames: -1, bytes: 10, chunks: 1, sha: Self.sha([])), .frames),
        (Self.header(bytes: 0, chunks: 1, sha: Self.sha([])), .bytes),
        (Self.header(bytes: -5, chunks: 1, sha: Self.sha([])), .bytes),
        (Self.header(bytes: Int.max, chunks: Int.max, sha: Self.sha([])), .bytes),
        (Self.header(bytes: (1 << 20) + 1, chunks: 17, sha: Self.sha([])), .bytes),
        (Self.header(bytes: 10, chunks: 1, sha: "abc"), .sha256Format),
        (Self.header(bytes: 10, chunks: 1, sha: String(repeating: "g", count: 64)), .sha256Format),
        (Self.header(bytes: 10, chunks: nil, sha: Self.sha([])), .chunks),
        (Self.header(bytes: 100_000, chunks: 1, sha: Self.sha([])), .chunks),
        (Self.header(bytes: 65_536, chunks: 2, sha: Self.sha([])), .chunks),
        (Self.header(bytes: 65_537, chunks: 1, sha: Self.sha([])), .chunks),
        (Self.header(bytes: 10, chunks: Int.min, sha: Self.sha([])), .chunks)
    ])
    func aHeaderOutOfRangeIsRefusedAndItsChunksAreDropped(header: String, reason: StreamSession.StateMachine.Rejection) {
        var machine = Self.opened()
        #expect(Self.reasons(machine.text(header)) == [reason])
        // Whatever chunks it announced go nowhere and say nothing.
        if header.contains(#""chunks""#) { #expect(machine.binary([UInt8](repeating: 1, count: 10)).isEmpty) }
        #expect(machine.bufferedBytes == 0)
        // The next header is read as usual.
        let data: [UInt8] = [1, 2, 3]
        _ = machine.text(Self.header(seq: 2, bytes: 3, chunks: 1, sha: Self.sha(data)))
        if case .inspect = machine.binary(data).first {} else { Issue.record("the session did not go on") }
    }

    @Test func moreBytesThanTheHeaderSaidAreRefusedAtOnce() {
        var machine = Self.opened()
        _ = machine.text(Self.header(bytes: 100_000, chunks: 2, sha: Self.sha([])))
        #expect(machine.binary([UInt8](repeating: 0, count: Self.chunk)).isEmpty)
        #expect(Self.reasons(machine.binary([UInt8](repeating: 0, count: Self.chunk))) == [.overrun])
        #expect(machine.bufferedBytes == 0)
    }

    @Test func aDigestThatDoesNotMatchIsRefused() {
        var machine = Self.opened()
        _ = machine.text(Self.header(bytes: 3, chunks: 1, sha: Self.sha([9, 9, 9])))
        #expect(Self.reasons(machine.binary([1, 2, 3])) == [.digest])
    }

    @Test func aTextBeforeTheLastChunkEndsTheSegmentAndIsReadAsNew() {
        var machine = Self.opened()
        _ = machine.text(Self.header(bytes: 100_000, chunks: 2, sha: Self.sha([])))
        _ = machine.binary([UInt8](repeating: 0, count: Self.chunk))
        let actions = machine.text(#"{"type":"future-thing"}"#)
        #expect(Self.reasons(actions) == [.incomplete])
        #expect(actions.last == .ignore(#"message of unknown type "future-thing""#))
        #expect(machine.bufferedBytes == 0)
    }

    @Test func outOfOrderAndUnreadableMessagesAreBadMessagesAndTheSessionGoesOn() {
        var machine = Self.opened()
        #expect(Self.reasons(machine.text(Self.hello())) == [.outOfOrder])
        #expect(Self.reasons(machine.binary([1])) == [.outOfOrder])
        #expect(Self.reasons(machine.text("{not json")) == [.unreadable])
        #expect(Self.reasons(machine.text(#"{"type":"segment","seq":"one"}"#)) == [.unreadable])
        #expect(machine.isOpen)
    }

    /// Any sequence of messages, numbers anywhere in Int's range: no trap, never more buffered
    /// than the limit, never a verified segment whose checks did not hold.
    @Test func randomMessagesNeverTrapOrBufferPastTheLimit() async {
        let step = Gen.int(in: 0...6)
        await propertyCheck(count: 300, input: step.array(of: 1...24), Gen.int().array(of: 96)) { kinds, numbers in
            var machine = StreamSession.StateMachine(limits: Self.limits)
            for (index, kind) in kinds.enumerated() {
                let n = numbers[(index * 4) % numbers.count], m = numbers[(index * 4 + 1) % numbers.count]
                let small = Int(truncatingIfNeeded: UInt(bitPattern: n) % 200_000)
                let actions: [StreamSession.StateMachine.Action] =
                    switch kind {
                    case 0: machine.text(Self.hello(segmentMs: m % 3 == 0 ? m : 5000))
                    case 1:
                        machine.text(
                            Self.header(
                                seq: n, durationMs: m, bytes: small, chunks: (small + Self.chunk - 1) / Self.chunk, sha: Self.sha([])))
                    case 2: machine.text(Self.header(seq: m, durationMs: 5000, bytes: n, chunks: m, sha: Self.sha([])))
                    case 3: machine.binary([UInt8](repeating: 7, count: min(small, Self.chunk + 10)))
                    case 4: machine.text(#"{"type":"segment","seq":\#(n),"durationMs":\#(m),"bytes":1e400}"#)
                    case 5: machine.text(String(decoding: withUnsafeBytes(of: n) { Array($0) }, as: UTF8.self))
                    default: machine.text(#"{"type":"\#(m)"}"#)
                    }
                #expect(machine.bufferedBytes <= Self.limits.maxSegmentBytes)
                for case .inspect(let segment) in actions {
                    #expect(segment.data.count == segment.header.bytes && Self.sha(Array(segment.data)) == segment.sha256)
                    #expect(segment.seconds > 0 && segment.seconds <= 2 * Self.limits.maxSegmentMs / 1000)
                }
            }
        }
    }

    // MARK: - The MP4 against its header

    static let agent = StreamSession.StateMachine.Agent(locale: "en-US", agent: "test", stream: "s1", segmentMs: 5000)
    static let hevc = SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 5000)

    static func verified(frames: Int = 50, durationMs: Int = 5000) -> StreamSession.StateMachine.Verified {
        let header = ClientMessage.SegmentHeader(
            seq: 3, capturedAt: "2026-11-22T04:17:17.569Z", durationMs: durationMs, frames: frames,
            bytes: 4, sha256: String(repeating: "a", count: 64), chunks: 1)
        return .init(header: header, data: Data([1, 2, 3, 4]), sha256: header.sha256, seconds: (durationMs + 999) / 1000)
    }

    @Test(arguments: [
        (hevc, 5),
        (SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "h264", width: 640, height: 360, frames: 50, durationMs: 5000), 5),
        // Within the slack: charged by the file's own duration.
        (SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 5400), 6),
        (SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 4600), 5)
    ])
    func aSegmentWhoseMP4AgreesIsChargedByTheFilesDuration(video: SegmentVideo.Info, seconds: Int) {
        let machine = Self.opened()
        guard case .take(let segment) = machine.judge(Self.verified(), video: video, agent: Self.agent) else {
            Issue.record("refused \(video)")
            return
        }
        #expect(segment.seconds == seconds)
    }

    @Test(
        arguments: [
            (verified(), nil, StreamSession.StateMachine.Rejection.video),
            (
                verified(),
                SegmentVideo.Info(streams: 2, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 5000), .video
            ),
            (
                verified(),
                SegmentVideo.Info(streams: 2, videoStreams: 2, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 5000), .video
            ),
            (verified(), SegmentVideo.Info(streams: 1, videoStreams: 0, codec: "", width: 0, height: 0, frames: 0, durationMs: 0), .video),
            (
                verified(),
                SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "mpeg2video", width: 640, height: 360, frames: 50, durationMs: 5000),
                .video
            ),
            // The crash of the shipped config: a frame count that no clip has.
            (verified(frames: 10_000_000_000), hevc, .frames),
            (verified(frames: 1), hevc, .frames),
            (verified(frames: 0), hevc, .frames),
            (
                verified(),
                SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 0, durationMs: 5000), .frames
            ),
            // A 10-minute clip declared as 1 s, and one whose file says 10 minutes.
            (
                verified(durationMs: 1000),
                SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 600_000),
                .duration
            ),
            (verified(durationMs: 1000), hevc, .duration),
            (
                verified(),
                SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: 0), .duration
            ),
            (
                verified(),
                SegmentVideo.Info(streams: 1, videoStreams: 1, codec: "hevc", width: 640, height: 360, frames: 50, durationMs: Int.max),
                .duration
            )
        ] as [(StreamSession.StateMachine.Verified, SegmentVideo.Info?, StreamSession.StateMachine.Rejection)])
    func aSegmentWhoseMP4DisagreesIsABadSegment(
        segment: StreamSession.StateMachine.Verified, video: SegmentVideo.Info?,
        reason: StreamSession.StateMachine.Rejection
    ) {
        let machine = Self.opened()
        let verdict = machine.judge(segment, video: video, agent: Self.agent)
        guard case .refuse(let text, 3, let rejection) = verdict else {
            Issue.record("\(verdict)")
            return
        }
        #expect(rejection == reason, "\(text)")
    }

    // MARK: - Usage and the ledger's answer

    /// With usage limited and none left, a segment is not charged (nor acknowledged); any left,
    /// or no limit, and it is.
    @Test func aSegmentIsChargedOnlyWithUsageLeft() {
        #expect(!StreamSession.StateMachine.mayCharge(remaining: 0))
        #expect(StreamSession.StateMachine.mayCharge(remaining: 1))
        #expect(StreamSession.StateMachine.mayCharge(remaining: nil))
    }

    @Test(
        arguments: [
            // Charged: ack, then the usage left; the last second spent ends the session.
            (.charged(remaining: nil), .acknowledge(usageLeft: nil, endsSession: false)),
            (.charged(remaining: 42), .acknowledge(usageLeft: 42, endsSession: false)),
            (.charged(remaining: 0), .acknowledge(usageLeft: 0, endsSession: true)),
            // A re-send whose ack was lost is acknowledged again; other bytes under its seq are refused.
            (.chargedBefore(sameBytes: true), .acknowledgeAgain),
            (.chargedBefore(sameBytes: false), .refuseOtherContent),
            // Never acknowledged: a newer session has the device, or the ledger failed.
            (.fenced, .superseded),
            (.failed, .ledgerUnavailable)
        ] as [(StreamSession.StateMachine.LedgerAnswer, StreamSession.StateMachine.ChargeOutcome)])
    func theLedgersAnswerDecidesWhatTheCarHears(
        ledger: StreamSession.StateMachine.LedgerAnswer,
        outcome: StreamSession.StateMachine.ChargeOutcome
    ) {
        #expect(StreamSession.StateMachine.answer(ledger) == outcome)
    }
}
