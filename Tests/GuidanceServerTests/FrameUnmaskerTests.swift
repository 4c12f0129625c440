@testable import GuidanceServer
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// The server's own unmasking gives the bytes NIO's does, for every length and key, and a frame
/// that went through it reads the same as one that did not.
@Suite struct FrameUnmaskerTests {
    @Test(arguments: [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 1000, 65_536 + 5])
    func unmasksAsNIODoes(length: Int) throws {
        var generator = SystemRandomNumberGenerator()
        let payload = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for _ in 0..<8 {
            let key = try #require(WebSocketMaskingKey((0..<4).map { _ in UInt8.random(in: 0...255, using: &generator) }))
            var ours = ByteBuffer(bytes: payload)
            var theirs = ours
            FrameUnmasker.unmask(&ours, key: key)
            theirs.webSocketUnmask(key)
            #expect(ours == theirs)
            // Masking twice is the identity.
            FrameUnmasker.unmask(&ours, key: key)
            #expect(Array(ours.readableBytesView) == payload)
        }
    }

    @Test func passesFramesOnUnmasked() throws {
        let channel = EmbeddedChannel(handler: FrameUnmasker())
        let key = try #require(WebSocketMaskingKey([0x12, 0x34, 0x56, 0x78]))
        let text = ByteBuffer(string: #"{"type":"hello","protocol":1}"#)
        var masked = text
        masked.webSocketMask(key)
        let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: key, data: masked)
        try channel.writeInbound(frame)
        let read = try #require(try channel.readInbound(as: WebSocketFrame.self))
        #expect(read.maskKey == nil)
        #expect(read.unmaskedData == text)
        #expect(read.unmaskedData == frame.unmaskedData)
        #expect(try channel.finish().isClean)
    }
}
