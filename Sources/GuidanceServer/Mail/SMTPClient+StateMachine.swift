import Foundation

extension SMTPClient {
    /// The rules of one SMTP conversation (RFC 5321, STARTTLS by RFC 3207, AUTH PLAIN by RFC 4954
    /// and 4616), with no I/O: replies and the end of the TLS handshake in, actions out.
    ///
    /// EHLO; STARTTLS when the relay offers it (with `mail.starttls: required`, nothing is sent to
    /// a relay that does not); EHLO again over TLS; AUTH PLAIN with credentials, only ever over
    /// TLS; MAIL FROM, RCPT TO, DATA, the message, QUIT. Any refusal goes to QUIT with the reason.
    struct StateMachine: Sendable {
        typealias StartTLS = ServerConfig.StartTLS

        struct Settings: Sendable {
            /// What the client calls itself in EHLO: a host name or an address literal.
            var ehloName: String
            var startTLS: StartTLS
            var credentials: (username: String, password: String)?
            var from: String
            var to: String
        }

        enum Action: Equatable, Sendable {
            /// A command; the I/O adds CRLF.
            case send(String)
            /// Put TLS on the connection (verifying the relay's certificate), then call
            /// ``tlsStarted()``.
            case startTLS
            /// The message itself, dot-stuffed and ended with `CRLF.CRLF` (``MailMessage``).
            case sendMessage
            /// Close the connection: the conversation is over.
            case finish(Outcome)
        }

        enum Outcome: Equatable, Sendable {
            case sent
            case failed(SMTPFailure)
        }

        private enum State: Equatable {
            case greeting
            case hello(tls: Bool)
            case startingTLS
            case handshaking
            case authenticating
            case mailFrom
            case rcptTo
            case data
            case message
            case quitting(Outcome)
            case finished(Outcome)
        }

        private var state = State.greeting
        private var tls = false
        let settings: Settings

        init(settings: Settings) { self.settings = settings }

        /// The outcome once the conversation is over; nil while it goes on.
        var outcome: Outcome? {
            if case .finished(let outcome) = state { return outcome }
            return nil
        }

        /// What the commands' arguments may hold: the values are checked before (``MailMessage``),
        /// and a command never carries a line end.
        private static func line(_ text: String) -> String {
            String(text.unicodeScalars.filter { $0 != "\r" && $0 != "\n" }.map(Character.init))
        }

        mutating func received(_ reply: SMTPReply) -> [Action] {
            switch state {
            case .greeting:
                guard reply.code == 220 else { return fail(.refused("the connection", reply)) }
                state = .hello(tls: false)
                return [.send("EHLO " + Self.line(settings.ehloName))]
            case .hello(let overTLS):
                guard reply.code == 250 else { return fail(.refused("EHLO", reply)) }
                let extensions = Self.extensions(reply)
                if !overTLS {
                    if extensions["STARTTLS"] != nil {
                        state = .startingTLS
                        return [.send("STARTTLS")]
                    }
                    if settings.startTLS == .required { return fail(.startTLSNotOffered) }
                    if settings.credentials != nil { return fail(.authWithoutTLS) }
                }
                if let credentials = settings.credentials {
                    guard tls else { return fail(.authWithoutTLS) }
                    guard extensions["AUTH"]?.contains("PLAIN") == true else { return fail(.authNotOffered) }
                    state = .authenticating
                    let plain = Data([0] + Array(credentials.username.utf8) + [0] + Array(credentials.password.utf8)).base64EncodedString()
                    return [.send("AUTH PLAIN " + plain)]
                }
                return mailFrom()
            case .startingTLS:
                guard reply.code == 220 else { return fail(.refused("STARTTLS", reply)) }
                state = .handshaking
                return [.startTLS]
            case .handshaking:
                // Nothing may come in clear between STARTTLS's 220 and the handshake.
                return fail(.malformed("a reply before the TLS handshake: \(reply.text.prefix(80))"))
            case .authenticating:
                guard reply.code == 235 else { return fail(.refused("AUTH PLAIN", reply)) }
                return mailFrom()
            case .mailFrom:
                guard reply.isPositive else { return fail(.refused("MAIL FROM", reply)) }
                state = .rcptTo
                return [.send("RCPT TO:<\(Self.line(settings.to))>")]
            case .rcptTo:
                guard reply.isPositive else { return fail(.refused("RCPT TO", reply)) }
                state = .data
                return [.send("DATA")]
            case .data:
                guard reply.code == 354 else { return fail(.refused("DATA", reply)) }
                state = .message
                return [.sendMessage]
            case .message:
                guard reply.isPositive else { return fail(.refused("the message", reply)) }
                state = .quitting(.sent)
                return [.send("QUIT")]
            case .quitting(let outcome):
                // Whatever the answer to QUIT: what came before it decided.
                state = .finished(outcome)
                return [.finish(outcome)]
            case .finished:
                return []
            }
        }

        /// The TLS handshake after STARTTLS is done: the session starts again with EHLO (RFC 3207
        /// §4.2: nothing learnt before TLS counts).
        mutating func tlsStarted() -> [Action] {
            guard state == .handshaking else { return [] }
            tls = true
            state = .hello(tls: true)
            return [.send("EHLO " + Self.line(settings.ehloName))]
        }

        /// The connection ended or failed (`failure`): over, with what QUIT was waiting to say, or
        /// with the failure.
        mutating func closed(_ failure: SMTPFailure = .closed) -> [Action] {
            switch state {
            case .finished:
                return []
            case .quitting(let outcome):
                state = .finished(outcome)
                return [.finish(outcome)]
            default:
                state = .finished(.failed(failure))
                return [.finish(.failed(failure))]
            }
        }

        private mutating func mailFrom() -> [Action] {
            state = .mailFrom
            return [.send("MAIL FROM:<\(Self.line(settings.from))>")]
        }

        private mutating func fail(_ failure: SMTPFailure) -> [Action] {
            state = .quitting(.failed(failure))
            return [.send("QUIT")]
        }

        /// An EHLO reply's extensions (the lines after the first): keyword, upper-cased, to its
        /// parameters, upper-cased.
        static func extensions(_ reply: SMTPReply) -> [String: [String]] {
            var found: [String: [String]] = [:]
            for line in reply.lines.dropFirst() {
                let words = line.uppercased().split(separator: " ").map(String.init)
                guard let keyword = words.first else { continue }
                found[keyword] = Array(words.dropFirst())
            }
            return found
        }
    }
}
