import GuidanceServer

/// What a mail relay answers the server (`mail.relay`): bytes cut into replies by
/// ``SMTPReplyParser``, in two reads cut where the input's first byte says. Every reply is
/// within its bounds, holds no line end, and the cut changes nothing: read whole, the same
/// replies come, or the same refusal.
enum SMTP {
    static func run(_ input: UnsafeRawBufferPointer) {
        guard let first = input.first else { return }
        let bytes = Array(input.dropFirst())
        let cut = min(bytes.count, Int(first) * 16)
        var pieces = SMTPReplyParser()
        var whole = SMTPReplyParser()
        let inPieces: [SMTPReply]?
        do { inPieces = try pieces.feed(bytes[..<cut]) + pieces.feed(bytes[cut...]) } catch { inPieces = nil }
        let inOne: [SMTPReply]?
        do { inOne = try whole.feed(bytes) } catch { inOne = nil }
        require(inPieces == inOne, "a cut changed the replies: \(String(describing: inPieces)) against \(String(describing: inOne))")
        for reply in inOne ?? [] {
            require((200...599).contains(reply.code), "reply code \(reply.code)")
            require(!reply.lines.isEmpty && reply.lines.count <= SMTPReplyParser.maxLines, "\(reply.lines.count) lines")
            require(reply.lines.reduce(0) { $0 + $1.utf8.count + 5 } <= SMTPReplyParser.maxReplyBytes, "a reply past its bound")
            for line in reply.lines {
                require(
                    line.utf8.count <= SMTPReplyParser.maxLineBytes && !line.utf8.contains(10),
                    "a line of \(line.utf8.count) bytes, or with a line end")
            }
        }
    }
}
