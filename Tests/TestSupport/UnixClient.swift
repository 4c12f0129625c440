import Foundation
import Glibc
import Synchronization

/// A plain `AF_UNIX` stream client on a file descriptor, as any local program would connect.
public final class UnixClient: Sendable {
    public let fd: Int32

    /// Nil when the connect fails (`errno` says why).
    public init?(path: String) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            return nil
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit { close(fd) }

    public func send(_ text: String) {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + sent, $0.count - sent) }
            guard n > 0 else { return }
            sent += n
        }
    }

    /// Everything the server sends until it closes the connection; nil if it is still open
    /// after `limit` (a bound against a hung test, not a figure under test). Waits on a thread of
    /// its own: the server under test runs on the same few threads as the test's tasks.
    public func readUntilClosed(limit: Duration = .seconds(60)) async -> String? {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { [self] in continuation.resume(returning: blockingReadUntilClosed(limit: limit)) }
        }
    }

    private func blockingReadUntilClosed(limit: Duration) -> String? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            var waiting = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&waiting, 1, 100) >= 0 else { return nil }
            guard waiting.revents != 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n == 0 { return String(decoding: received, as: UTF8.self) }
            if n < 0 { return errno == ECONNRESET ? String(decoding: received, as: UTF8.self) : nil }
            received += buffer[..<n]
        }
        return nil
    }
}
