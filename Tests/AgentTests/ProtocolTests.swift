import GuidanceProtocol
import Testing

@Suite struct ProtocolTests {
    @Test func serverMessagesRoundTrip() throws {
        let messages: [ServerMessage] = [
            .welcome(session: "s1", remainingSeconds: 2580),
            .welcome(session: "s2", remainingSeconds: nil),
            .ack(seq: 7),
            .guidance(.init(seq: 7, text: "보행자 주의", lang: "ko-KR", clear: false, priority: .urgent)),
            .usage(remainingSeconds: 300),
            .error(code: .badSegment, message: "sha256 mismatch", seq: 7),
            .error(code: .superseded, message: "newer connection", seq: nil)
        ]
        for message in messages {
            #expect(try ServerMessage.decode(message.encoded()) == message)
        }
        #expect(ServerMessage.welcome(session: "s", remainingSeconds: nil).encoded().contains(#""remainingSeconds":null"#))
    }

    @Test func unknownTypesAndFieldsAreTolerated() throws {
        #expect(try ServerMessage.decode(#"{"type":"weather","rain":true}"#) == .unknown(type: "weather"))
        #expect(try ServerMessage.decode(#"{"type":"ack","seq":3,"extra":{"a":1}}"#) == .ack(seq: 3))
        #expect(
            try ServerMessage.decode(#"{"type":"error","code":"teapot","message":"x"}"#)
                == .error(code: .other("teapot"), message: "x", seq: nil))
    }

    @Test func malformedMessagesSayWhatIsWrong() {
        #expect(throws: ProtocolError("not JSON")) { try ServerMessage.decode("{not json") }
        #expect(throws: ProtocolError("missing field 'seq'")) { try ServerMessage.decode(#"{"type":"ack"}"#) }
        #expect(throws: ProtocolError("field 'seq' is not Int")) { try ServerMessage.decode(#"{"type":"ack","seq":"3"}"#) }
        #expect(throws: ProtocolError("not a JSON object")) { try ServerMessage.decode(#"[1,2]"#) }
        #expect(throws: ProtocolError("missing field 'type'")) { try ServerMessage.decode(#"{"seq":1}"#) }
    }

    @Test func clientMessagesCarryTheirType() throws {
        let hello = ClientMessage.hello(
            .init(
                device: "car-1", locale: "ko-KR", agent: "0.1.0",
                video: .init(width: 640, height: 360, fps: 10, segmentMs: 5000)))
        let text = hello.encoded()
        #expect(text.contains(#""type":"hello""#) && text.contains(#""protocol":1"#) && text.contains(#""codec":"hevc""#))
        #expect(try ClientMessage.decode(text) == hello)
        let header = ClientMessage.segment(
            .init(
                seq: 1, capturedAt: "2026-11-22T04:17:17.569Z", durationMs: 5000,
                frames: 50, bytes: 100, sha256: String(repeating: "a", count: 64),
                chunks: 1))
        #expect(try ClientMessage.decode(header.encoded()) == header)
        #expect(!header.encoded().contains("data"))
    }

    @Test func helloCarriesItsStreamOnlyWhenSet() throws {
        let video = ClientMessage.Hello.Video(width: 640, height: 360, fps: 10, segmentMs: 5000)
        let withStream = ClientMessage.hello(.init(device: "car-1", locale: "ko-KR", agent: "0.1.0", video: video, stream: "s-1"))
        #expect(withStream.encoded().contains(#""stream":"s-1""#))
        #expect(try ClientMessage.decode(withStream.encoded()) == withStream)

        let without = ClientMessage.hello(.init(device: "car-1", locale: "ko-KR", agent: "0.1.0", video: video))
        #expect(!without.encoded().contains("stream"), "left out, so older servers see the hello they know")
        #expect(try ClientMessage.decode(without.encoded()) == without)

        // A hello from an older agent, without a stream, still reads.
        let old =
            #"{"type":"hello","protocol":1,"device":"car-1","locale":"ko-KR","agent":"0.0.9","#
            + #""video":{"codec":"hevc","container":"mp4","width":640,"height":360,"fps":10,"segmentMs":5000}}"#
        guard case .hello(let hello) = try ClientMessage.decode(old) else { Issue.record("not a hello"); return }
        #expect(hello.stream == nil && hello.device == "car-1")
    }
}
