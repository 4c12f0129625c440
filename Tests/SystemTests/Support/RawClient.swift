import Foundation
import Glibc

/// A WebSocket client made of a bare TCP socket, for what a well-behaved library will not do:
/// half-sent requests, silence, ignoring pings, frames with any numbers in them. Blocking, with
/// a receive timeout; frames it sends are masked as RFC 6455 requires of clients. Used by one
/// thread at a time (handed from a test to the thread that does its blocking work).
final class RawClient: @unchecked Sendable {
    let fd: Int32

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init(port: Int, receiveTimeoutMs: Int = 5000) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure(description: "connect to \(port): errno \(errno)")
        }
        setReceiveTimeout(milliseconds: receiveTimeoutMs)
    }

    deinit { close(fd) }

    func setReceiveTimeout(milliseconds: Int) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw Failure(description: "send: errno \(errno)") }
            sent += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// The upgrade request, optionally cut short after `prefix` bytes.
    static func upgradeRequest(token: String?, path: String = "/v1/stream") -> String {
        "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            + (token.map { "Authorization: Bearer \($0)\r\n" } ?? "") + "\r\n"
    }

    /// Sends the upgrade and reads the response head; its status code and text.
    func upgrade(token: String?) throws -> (status: Int, head: String) {
        try send(Self.upgradeRequest(token: token))
        return try readHead()
    }

    func readHead() throws -> (status: Int, head: String) {
        var head: [UInt8] = []
        while !head.ends(with: Array("\r\n\r\n".utf8)) {
            guard let byte = try readExactly(1)?.first else { throw Failure(description: "closed during the response head") }
            head.append(byte)
        }
        let text = String(decoding: head, as: UTF8.self)
        let status = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return (status, text)
    }

    enum Opcode: UInt8 {
        case continuation = 0, text = 1, binary = 2, close = 8, ping = 9, pong = 10
    }

    /// One masked frame with `fin` set.
    func sendFrame(_ opcode: Opcode, _ payload: [UInt8]) throws {
        var frame: [UInt8] = [0x80 | opcode.rawValue]
        switch payload.count {
        case ..<126: frame.append(0x80 | UInt8(payload.count))
        case ..<65536: frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xff)]
        default: frame += [0x80 | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xff) }
        }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        frame += mask
        frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        try send(frame)
    }

    func sendText(_ text: String) throws { try sendFrame(.text, Array(text.utf8)) }

    /// The next frame from the server (unmasked); `nil` when the connection is closed or the
    /// receive timeout passes.
    func readFrame() throws -> (opcode: UInt8, payload: [UInt8])? {
        guard let first = try readExactly(2) else { return nil }
        var length = Int(first[1] & 0x7f)
        if length == 126 {
            guard let more = try readExactly(2) else { return nil }
            length = Int(more[0]) << 8 | Int(more[1])
        } else if length == 127 {
            guard let more = try readExactly(8) else { return nil }
            length = more.reduce(0) { $0 << 8 | Int($1) }
        }
        guard let payload = try readExactly(length) else { return nil }
        return (first[0] & 0x0f, payload)
    }

    /// Frames until a close frame (its code), the connection's end, the receive timeout or
    /// `within` (`nil`); pings are answered when `answerPings`, and every frame's opcode is collected.
    func readUntilClose(answerPings: Bool, within: Duration = .seconds(60), seen: inout [UInt8]) throws -> Int? {
        let deadline = ContinuousClock.now + within
        while ContinuousClock.now < deadline, let frame = try readFrame() {
            seen.append(frame.opcode)
            if frame.opcode == Opcode.ping.rawValue, answerPings { try sendFrame(.pong, frame.payload) }
            if frame.opcode == Opcode.close.rawValue {
                return frame.payload.count >= 2 ? Int(frame.payload[0]) << 8 | Int(frame.payload[1]) : 1005
            }
        }
        return nil
    }

    /// Text frames until one contains `needle` (or the timeout / the end): all of them.
    func readTexts(until needle: String) throws -> [String] {
        var texts: [String] = []
        while let frame = try readFrame() {
            if frame.opcode == Opcode.text.rawValue {
                texts.append(String(decoding: frame.payload, as: UTF8.self))
                if texts.last?.contains(needle) == true { break }
            }
            if frame.opcode == Opcode.close.rawValue { break }
        }
        return texts
    }

    /// Whether the server has closed the connection: a read returns end-of-file (or a reset)
    /// before the timeout.
    func isClosedByPeer() -> Bool {
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    private func readExactly(_ count: Int) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = buffer[got...].withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNRESET { return nil }
                throw Failure(description: "recv: errno \(errno)")
            }
            got += n
        }
        return buffer
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}
