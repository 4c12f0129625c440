import Foundation
@testable import GuidanceServer
import Testing

/// An SMTP conversation's rules without a socket: replies cut from bytes (``SMTPReplyParser``),
/// and what the client says to each (``SMTPClient/StateMachine``).
@Suite struct SMTPClientStateMachineTests {
    typealias Machine = SMTPClient.StateMachine

    static func settings(startTLS: Machine.StartTLS = .whenOffered, credentials: (String, String)? = nil) -> Machine.Settings {
        .init(
            ehloName: "server.example.org", startTLS: startTLS, credentials: credentials.map { (username: $0.0, password: $0.1) },
            from: "dashcam@example.org", to: "ana@example.org")
    }

    static func reply(_ code: Int, _ lines: String...) -> SMTPReply { SMTPReply(code: code, lines: lines.isEmpty ? [""] : lines) }
    static let ehloWithTLS = reply(250, "relay.example.org", "PIPELINING", "STARTTLS", "8BITMIME")
    static let ehloPlain = reply(250, "relay.example.org", "PIPELINING", "8BITMIME")
    static let ehloOverTLS = reply(250, "relay.example.org", "AUTH PLAIN LOGIN", "8BITMIME")

    // MARK: - Replies

    @Test func repliesAreCutFromBytesInAnyPieces() throws {
        let text = Array("220 relay.example.org ESMTP\r\n250-relay.example.org\r\n250-STARTTLS\r\n250 AUTH PLAIN\r\n354 go on\n".utf8)
        let expected = [
            SMTPReply(code: 220, lines: ["relay.example.org ESMTP"]),
            SMTPReply(code: 250, lines: ["relay.example.org", "STARTTLS", "AUTH PLAIN"]),
            SMTPReply(code: 354, lines: ["go on"])
        ]
        for cut in 0...text.count {
            var parser = SMTPReplyParser()
            #expect(try parser.feed(text[..<cut]) + parser.feed(text[cut...]) == expected, "cut at \(cut)")
        }
        var byteByByte = SMTPReplyParser()
        #expect(try text.flatMap { try byteByByte.feed([$0]) } == expected)
        var bare = SMTPReplyParser()
        #expect(try bare.feed(Array("250\r\n".utf8)) == [SMTPReply(code: 250, lines: [""])], "a code alone is a reply")
    }

    /// Found by the fuzz target: bytes that are not UTF-8 became three bytes each in the reply's
    /// text, so a line within its bound came out past it. The text is printable ASCII now.
    @Test func aLineOfBytesThatAreNotTextStaysWithinItsBound() throws {
        var parser = SMTPReplyParser()
        let line = Array("250 ".utf8) + [UInt8](repeating: 0xFF, count: SMTPReplyParser.maxLineBytes - 4) + Array("\r\n".utf8)
        let replies = try parser.feed(line)
        #expect(replies.count == 1 && replies[0].lines[0].utf8.count == SMTPReplyParser.maxLineBytes - 4)
        #expect(replies[0].lines[0].allSatisfy { $0 == "?" })
    }

    @Test func whatIsNotAReplyOrPastItsBoundsEndsTheConversation() {
        for bad in [
            "hello\r\n", "25\r\n", "2x0 no\r\n", "650 no\r\n", "250_no\r\n", "250-a\r\n251 b\r\n",
            "250 " + String(repeating: "x", count: SMTPReplyParser.maxLineBytes) + "\r\n",
            String(repeating: "250-x\r\n", count: SMTPReplyParser.maxLines + 1),
            String(repeating: "250-" + String(repeating: "y", count: 900) + "\r\n", count: 20)
        ] {
            var parser = SMTPReplyParser()
            #expect(throws: SMTPFailure.self, "\(bad.prefix(40))") { try parser.feed(Array(bad.utf8)) }
        }
        // A line that never ends is refused once it passes the bound, not kept growing.
        var parser = SMTPReplyParser()
        #expect(throws: SMTPFailure.self) { try parser.feed(Array(repeating: UInt8(ascii: "2"), count: 5000)) }
    }

    // MARK: - The conversation

    @Test func startTLSThenEHLOAgainThenAuthOnlyOverTLSThenTheMessage() {
        var machine = Machine(settings: Self.settings(credentials: ("ana", "secret")))
        #expect(machine.received(Self.reply(220, "relay.example.org ESMTP")) == [.send("EHLO server.example.org")])
        #expect(machine.received(Self.ehloWithTLS) == [.send("STARTTLS")])
        #expect(machine.received(Self.reply(220, "go ahead")) == [.startTLS])
        #expect(machine.tlsStarted() == [.send("EHLO server.example.org")], "what was learnt before TLS does not count")
        // "\0ana\0secret" in base64.
        #expect(machine.received(Self.ehloOverTLS) == [.send("AUTH PLAIN AGFuYQBzZWNyZXQ=")])
        #expect(machine.received(Self.reply(235, "ok")) == [.send("MAIL FROM:<dashcam@example.org>")])
        #expect(machine.received(Self.reply(250, "ok")) == [.send("RCPT TO:<ana@example.org>")])
        #expect(machine.received(Self.reply(250, "ok")) == [.send("DATA")])
        #expect(machine.received(Self.reply(354, "go on")) == [.sendMessage])
        #expect(machine.received(Self.reply(250, "queued")) == [.send("QUIT")])
        #expect(machine.outcome == nil, "QUIT is answered before the connection closes")
        #expect(machine.received(Self.reply(221, "bye")) == [.finish(.sent)])
        #expect(machine.outcome == .sent)
    }

    @Test func aRelayWithoutSTARTTLSGetsNothingWhenTLSIsRequired() {
        var machine = Machine(settings: Self.settings(startTLS: .required))
        _ = machine.received(Self.reply(220))
        #expect(machine.received(Self.ehloPlain) == [.send("QUIT")])
        #expect(machine.received(Self.reply(221)) == [.finish(.failed(.startTLSNotOffered))])
        #expect(!SMTPFailure.startTLSNotOffered.isTransient, "trying again does not make the relay offer it")
    }

    @Test func withoutTLSAMailGoesInClearButAPasswordNever() {
        var plain = Machine(settings: Self.settings())
        _ = plain.received(Self.reply(220))
        #expect(plain.received(Self.ehloPlain) == [.send("MAIL FROM:<dashcam@example.org>")])

        var withPassword = Machine(settings: Self.settings(credentials: ("ana", "secret")))
        _ = withPassword.received(Self.reply(220))
        // The relay offers AUTH in clear: still nothing.
        #expect(withPassword.received(Self.reply(250, "relay", "AUTH PLAIN")) == [.send("QUIT")])
        #expect(withPassword.closed() == [.finish(.failed(.authWithoutTLS))], "a relay that hangs up after QUIT ends it too")

        var noPlain = Machine(settings: Self.settings(credentials: ("ana", "secret")))
        _ = noPlain.received(Self.reply(220))
        _ = noPlain.received(Self.ehloWithTLS)
        _ = noPlain.received(Self.reply(220))
        _ = noPlain.tlsStarted()
        #expect(noPlain.received(Self.reply(250, "relay", "AUTH LOGIN")) == [.send("QUIT")])
        #expect(noPlain.closed() == [.finish(.failed(.authNotOffered))])
    }

    @Test func aRefusalIsToldWithWhetherItMayPass() {
        var busy = Machine(settings: Self.settings())
        _ = busy.received(Self.reply(220))
        _ = busy.received(Self.ehloPlain)
        _ = busy.received(Self.reply(250))
        #expect(busy.received(Self.reply(451, "4.3.0 try later")) == [.send("QUIT")])
        guard case .finish(.failed(let transient))? = busy.received(Self.reply(221)).first else { Issue.record("no finish"); return }
        #expect(transient.isTransient && transient.description.contains("RCPT TO") && transient.description.contains("451"))

        var unknown = Machine(settings: Self.settings())
        _ = unknown.received(Self.reply(220))
        _ = unknown.received(Self.ehloPlain)
        _ = unknown.received(Self.reply(250))
        _ = unknown.received(Self.reply(550, "5.1.1 no such user"))
        guard case .finish(.failed(let permanent))? = unknown.closed().first else { Issue.record("no finish"); return }
        #expect(!permanent.isTransient)

        // A greeting that is not 220, and a reply in clear between STARTTLS and the handshake.
        var closedShop = Machine(settings: Self.settings())
        #expect(closedShop.received(Self.reply(554, "no service")) == [.send("QUIT")])
        var injected = Machine(settings: Self.settings())
        _ = injected.received(Self.reply(220))
        _ = injected.received(Self.ehloWithTLS)
        _ = injected.received(Self.reply(220))
        #expect(injected.received(Self.reply(250, "sneaked in")) == [.send("QUIT")])
        #expect(injected.tlsStarted().isEmpty, "no TLS after a failure")
        // A connection lost before QUIT is transient.
        var lost = Machine(settings: Self.settings())
        _ = lost.received(Self.reply(220))
        #expect(lost.closed() == [.finish(.failed(.closed))])
        #expect(SMTPFailure.closed.isTransient)
    }

    @Test func extensionsAreReadByKeywordWhateverTheCase() {
        let found = Machine.extensions(Self.reply(250, "relay greets you", "starttls", "Auth plain LOGIN", "SIZE 1000"))
        #expect(found["STARTTLS"] == [] && found["AUTH"] == ["PLAIN", "LOGIN"] && found["SIZE"] == ["1000"])
        #expect(found["RELAY"] == nil, "the first line is the relay's name, not an extension")
    }
}
