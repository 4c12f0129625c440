import Foundation
import Glibc
import TestSupport

/// A server namespace reachable from a car namespace over two veth paths, made for one test and
/// deleted after it. Addresses only in 10.231.10.0/24–10.231.12.0/24, only inside the namespaces.
///
///     car  va1 10.231.11.2 ── vs1 10.231.11.1  srv   (lo 10.231.10.1: the server)
///          va2 10.231.12.2 ── vs2 10.231.12.1
///
/// The car's default route goes through path 1; `switchToPath(2)` moves it.
struct TwoPaths {
    static let serverAddress = "10.231.10.1"
    static let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Root, iproute2, and namespaces allowed here (a container may forbid them).
    static let available: Bool = {
        guard getuid() == 0, let ip else { return false }
        let name = "uplink-check-\(getpid())"
        guard (try? Command.execute(ip, ["netns", "add", name]))?.status == 0 else { return false }
        _ = try? Command.execute(ip, ["netns", "del", name])
        return true
    }()

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let server: String
    let car: String

    init() throws {
        let tag = "\(getpid())-\(UInt16.random(in: 0...UInt16.max))"
        server = "uplink-srv-\(tag)"
        car = "uplink-car-\(tag)"
        try Self.ip(["netns", "add", server])
        try Self.ip(["netns", "add", car])
        do {
            for ns in [server, car] { try Self.ip(["-n", ns, "link", "set", "lo", "up"]) }
            try Self.ip(["-n", server, "addr", "add", "\(Self.serverAddress)/32", "dev", "lo"])
            for path in 1...2 {
                try Self.ip(["-n", server, "link", "add", "vs\(path)", "type", "veth", "peer", "name", "va\(path)", "netns", car])
                try Self.ip(["-n", server, "addr", "add", "10.231.1\(path).1/24", "dev", "vs\(path)"])
                try Self.ip(["-n", car, "addr", "add", "10.231.1\(path).2/24", "dev", "va\(path)"])
                try Self.ip(["-n", server, "link", "set", "vs\(path)", "up"])
                try Self.ip(["-n", car, "link", "set", "va\(path)", "up"])
            }
            try Self.ip(["-n", car, "route", "add", "default", "via", "10.231.11.1", "dev", "va1"])
        } catch {
            remove()
            throw error
        }
    }

    /// Names `address` `host` inside the car: `ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts.
    func nameInCar(_ host: String, _ address: String) throws {
        let folder = "/etc/netns/\(car)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try "127.0.0.1 localhost\n\(address) \(host)\n".write(toFile: folder + "/hosts", atomically: true, encoding: .utf8)
    }

    /// Runs a program inside a namespace: the prefix for ``Spawned``.
    func exec(in namespace: String) -> [String] { [Self.ip ?? "ip", "netns", "exec", namespace] }

    /// Moves the car's default route to the other path, as a phone's Wi-Fi to LTE hand-over does.
    func switchToPath(_ path: Int) throws {
        try Self.ip(["-n", car, "route", "replace", "default", "via", "10.231.1\(path).1", "dev", "va\(path)"])
    }

    /// Takes the car's side of a path down: whatever is in flight on it is lost, and the kernel
    /// drops the routes through it.
    func linkDown(_ path: Int) throws {
        try Self.ip(["-n", car, "link", "set", "va\(path)", "down"])
    }

    func remove() {
        for ns in [car, server] { _ = try? Command.execute(Self.ip ?? "ip", ["netns", "del", ns]) }
        try? FileManager.default.removeItem(atPath: "/etc/netns/\(car)")
    }

    private static func ip(_ arguments: [String]) throws {
        let result = try Command.execute(ip ?? "ip", arguments)
        guard result.status == 0 else {
            throw Failure(description: "ip \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
        }
    }
}
