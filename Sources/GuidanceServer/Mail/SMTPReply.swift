/// One reply of an SMTP server (RFC 5321 §4.2): a three-digit code and its lines of text, the
/// lines of a multi-line reply (`250-…` up to `250 …`) together.
public struct SMTPReply: Sendable, Equatable {
    public var code: Int
    public var lines: [String]

    /// 2xx: the command was done.
    var isPositive: Bool { (200..<300).contains(code) }
    /// 4xx: not now, maybe later.
    var isTransient: Bool { (400..<500).contains(code) }

    /// The reply as a server wrote it, on one line, for a log or an error.
    var text: String { "\(code) " + lines.joined(separator: " / ") }
}

/// Cuts what an SMTP server sends into replies. A server is outside: every line and every reply
/// is bounded, and anything that is not a reply ends the conversation (``SMTPFailure``), never the
/// program. Lines end with CRLF (a bare LF is taken too); bytes may come in any pieces.
public struct SMTPReplyParser: Sendable {
    /// A reply line's longest (RFC 5321 §4.5.3.1.5 says 512 with its CRLF; servers write longer
    /// EHLO lines), without its line end.
    public static let maxLineBytes = 1000
    /// Lines of one reply (an EHLO answer has one per extension).
    public static let maxLines = 64
    /// Bytes of one reply, every line together.
    public static let maxReplyBytes = 16_384

    private var line: [UInt8] = []
    private var code: Int?
    private var lines: [String] = []
    private var replyBytes = 0

    public init() {}

    /// Nothing of a reply waits: no line begun, no line of an unfinished reply.
    public var isEmpty: Bool { line.isEmpty && lines.isEmpty }

    /// The replies `bytes` complete, in order; what is left of an unfinished one is kept for the
    /// next call. After a throw the parser is not to be used again.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(SMTPFailure) -> [SMTPReply] {
        var replies: [SMTPReply] = []
        for byte in bytes {
            guard byte == UInt8(ascii: "\n") else {
                guard line.count < Self.maxLineBytes + 1 else { throw .malformed("a reply line longer than \(Self.maxLineBytes) bytes") }
                line.append(byte)
                continue
            }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            defer { line.removeAll(keepingCapacity: true) }
            if let reply = try take(line) { replies.append(reply) }
        }
        return replies
    }

    /// One line: part of a reply, or its last line (then the reply).
    private mutating func take(_ line: [UInt8]) throws(SMTPFailure) -> SMTPReply? {
        guard line.count <= Self.maxLineBytes else { throw .malformed("a reply line longer than \(Self.maxLineBytes) bytes") }
        guard line.count >= 3, (UInt8(ascii: "2")...UInt8(ascii: "5")).contains(line[0]),
            (UInt8(ascii: "0")...UInt8(ascii: "5")).contains(line[1]), (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(line[2])
        else { throw .malformed("a reply line without a reply code: \(Self.shown(line))") }
        let value = Int(line[0] - 48) * 100 + Int(line[1] - 48) * 10 + Int(line[2] - 48)
        let last: Bool
        switch line.count > 3 ? line[3] : UInt8(ascii: " ") {
        case UInt8(ascii: " "): last = true
        case UInt8(ascii: "-"): last = false
        default: throw .malformed("a reply line whose code is not followed by a space or '-': \(Self.shown(line))")
        }
        if let code, code != value { throw .malformed("a multi-line reply whose lines change code (\(code), then \(value))") }
        code = value
        replyBytes += line.count + 2
        guard replyBytes <= Self.maxReplyBytes, lines.count < Self.maxLines else {
            throw .malformed("a reply longer than \(Self.maxLines) lines or \(Self.maxReplyBytes) bytes")
        }
        // Text for logs and for reading the EHLO keywords: printable ASCII, anything else '?', so
        // a line stays within its bytes (a broken UTF-8 byte would become three).
        lines.append(
            line.count > 4 ? String(decoding: line[4...].map { (32..<127).contains($0) ? $0 : UInt8(ascii: "?") }, as: UTF8.self) : "")
        guard last else { return nil }
        defer {
            code = nil
            lines = []
            replyBytes = 0
        }
        return SMTPReply(code: value, lines: lines)
    }

    /// A server's line in an error: printable ASCII only, cut.
    static func shown(_ line: [UInt8]) -> String {
        String(decoding: line.prefix(80).map { (32..<127).contains($0) ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }
}

/// Why a mail was not sent: the relay's answer, the connection, or a rule of ours the relay
/// could not meet. ``isTransient`` says whether trying again later can help.
public struct SMTPFailure: Error, Equatable, Sendable, CustomStringConvertible {
    private enum Kind: Equatable, Sendable {
        case refused(command: String, reply: String, transient: Bool)
        case malformed(String)
        case startTLSNotOffered
        case authWithoutTLS
        case authNotOffered
        case connection(String)
        case timedOut(String)
        case closed
    }

    private let kind: Kind

    /// The relay answered `command` with an error.
    static func refused(_ command: String, _ reply: SMTPReply) -> Self {
        .init(kind: .refused(command: command, reply: String(reply.text.prefix(300)), transient: reply.isTransient))
    }
    static func malformed(_ what: String) -> Self { .init(kind: .malformed(what)) }
    /// `mail.starttls: required` and the relay's EHLO offers no STARTTLS.
    static let startTLSNotOffered = Self(kind: .startTLSNotOffered)
    /// Credentials are set and the connection is not encrypted: they are never sent in clear.
    static let authWithoutTLS = Self(kind: .authWithoutTLS)
    static let authNotOffered = Self(kind: .authNotOffered)
    static func connection(_ error: String) -> Self { .init(kind: .connection(error)) }
    static func timedOut(_ waiting: String) -> Self { .init(kind: .timedOut(waiting)) }
    static let closed = Self(kind: .closed)

    /// Whether another try, later, can go better: a 4xx answer, a connection that failed.
    public var isTransient: Bool {
        switch kind {
        case .refused(_, _, let transient): transient
        case .connection, .timedOut, .closed: true
        case .malformed, .startTLSNotOffered, .authWithoutTLS, .authNotOffered: false
        }
    }

    public var description: String {
        switch kind {
        case .refused(let command, let reply, _): "the relay refused \(command): \(reply)"
        case .malformed(let what): "the relay sent \(what)"
        case .startTLSNotOffered: "the relay does not offer STARTTLS and mail.starttls is required; nothing was sent"
        case .authWithoutTLS:
            "the relay does not offer STARTTLS, and mail.username's password is only ever sent encrypted; nothing was sent"
        case .authNotOffered: "the relay does not offer AUTH PLAIN, which mail.username needs; nothing was sent"
        case .connection(let error): "cannot talk to the relay: \(error)"
        case .timedOut(let waiting): "the relay did not answer in time (\(waiting))"
        case .closed: "the relay closed the connection"
        }
    }
}
