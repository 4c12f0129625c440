public import Foundation
import Glibc

/// Tells systemd how the service is doing: `READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`.
///
/// The protocol is one datagram per message on the `AF_UNIX` socket named by `NOTIFY_SOCKET`
/// (a path, or an abstract name starting with `@`); no libsystemd needed. Without
/// `NOTIFY_SOCKET` (not started by systemd with `Type=notify`) every call does nothing.
public final class SystemdNotifier: Sendable {
    private let address: String?

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        address = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
    }

    public var isActive: Bool { address != nil }

    public func ready(status: String) { send("READY=1\nSTATUS=\(status)") }
    public func status(_ text: String) { send("STATUS=\(text)") }
    public func watchdog() { send("WATCHDOG=1") }
    public func stopping() { send("STOPPING=1\nSTATUS=stopping") }

    /// Sends one datagram; errors are ignored on purpose: systemd being away must not stop recording.
    func send(_ message: String) {
        guard let address else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        var path = Array(address.utf8)
        // An abstract socket's name starts with a NUL byte where systemd writes '@'.
        if path.first == UInt8(ascii: "@") { path[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: socketAddress.sun_path)
        guard path.count < capacity else { return }
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { raw in
            raw.copyBytes(from: path)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)
        let bytes = Array(message.utf8)
        _ = withUnsafePointer(to: &socketAddress) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address, length) }
            }
        }
    }
}
