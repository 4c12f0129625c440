import Foundation
import Glibc
import Synchronization
import Testing

// RTNetlinkMonitor on the real kernel, inside network namespaces these tests make: the
// netmon-probe executable (Tests/netmon-probe, built beside the test bundle) runs under
// `ip netns exec`, and the tests change that namespace's routes and addresses from outside with
// `ip -n`. Only addresses in 10.231.0.0/16 and fd00:231::/32, only inside those namespaces; every
// namespace is deleted again, whatever happens.

enum NetNS {
    static let probe = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("netmon-probe")
    static let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Root, iproute2, and a namespace can really be made here (a container may forbid it).
    /// Also deletes namespaces left by test runs that were killed before their cleanup.
    static let available: Bool = {
        guard getuid() == 0, let ip else { return false }
        removeLeftovers()
        let name = "netmon-check-\(getpid())"
        guard (try? run(ip, ["netns", "add", name]))?.status == 0 else { return false }
        _ = try? run(ip, ["netns", "del", name])
        return true
    }()

    /// `netmon-PID-...` namespaces whose test process is gone.
    static func removeLeftovers() {
        guard let ip, let list = try? run(ip, ["netns", "list"]), list.status == 0 else { return }
        for line in list.output.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            let parts = name.split(separator: "-")
            guard parts.count >= 3, parts[0] == "netmon", let pid = Int32(parts[1]), pid != getpid(),
                kill(pid, 0) != 0, errno == ESRCH
            else { continue }
            _ = try? run(ip, ["netns", "del", name])
        }
    }

    static func requireProbe() throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: probe.path),
            "netmon-probe is not beside the test bundle (\(probe.path)); `swift build --build-tests` builds it")
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs a command to its end; its stdout and stderr together.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    struct Route: Decodable, Equatable {
        var interface: String
        var gateway: String?
        var addresses: [String]
        var up: Bool
    }

    struct Path: Decodable, Equatable {
        var ipv4: Route?
        var ipv6: Route?
    }

    /// One line of netmon-probe, and when it arrived here (CLOCK_MONOTONIC).
    struct Event: Decodable {
        var event: String
        var path: Path?
        var old: Path?
        var new: Path?
        var reasons: [String]?
        var message: String?
        var monotonicNs: UInt64
        var arrivedNs: UInt64 = 0

        enum CodingKeys: String, CodingKey {
            case event, path, old, new, reasons, message, monotonicNs
        }
    }
}

/// A network namespace of the test's own, deleted by ``remove()``.
final class TestNamespace: Sendable {
    private static let counter = Atomic<Int>(0)
    let name: String

    init() throws {
        guard let ip = NetNS.ip else { throw NetNS.Failure(description: "no `ip` command") }
        name = "netmon-\(getpid())-\(Self.counter.add(1, ordering: .relaxed).newValue)-\(UInt16.random(in: 0...UInt16.max))"
        let result = try NetNS.run(ip, ["netns", "add", name])
        guard result.status == 0 else { throw NetNS.Failure(description: "ip netns add \(name): \(result.output)") }
    }

    func remove() {
        _ = try? NetNS.run(NetNS.ip ?? "ip", ["netns", "del", name])
    }

    /// `ip -n NAME ...`, which must succeed.
    func ip(_ arguments: String...) throws {
        let result = try NetNS.run(NetNS.ip ?? "ip", ["-n", name] + arguments)
        guard result.status == 0 else {
            throw NetNS.Failure(description: "ip -n \(name) \(arguments.joined(separator: " ")): \(result.output)")
        }
    }

    /// `ip -n NAME ...`, and how long it took to start it (CLOCK_MONOTONIC before launching).
    func timedIP(_ arguments: String...) throws -> UInt64 {
        let started = NetNS.monotonicNanoseconds()
        let result = try NetNS.run(NetNS.ip ?? "ip", ["-n", name] + arguments)
        guard result.status == 0 else {
            throw NetNS.Failure(description: "ip -n \(name) \(arguments.joined(separator: " ")): \(result.output)")
        }
        return started
    }

    /// Two uplinks, `veth-a` (10.231.1.2/24, fd00:231:1::2/64) and `veth-b` (10.231.2.2/24,
    /// fd00:231:2::2/64), each a veth whose peer stays in the namespace so that it has a
    /// carrier; default routes of both families via `veth-a`; and `extra0`, an unrelated
    /// interface (a dummy where the kernel has them, else another veth).
    func makeTwoUplinks() throws {
        try ip("link", "set", "lo", "up")
        for uplink in ["a", "b"] {
            try ip("link", "add", "veth-\(uplink)", "type", "veth", "peer", "name", "veth-\(uplink)-p")
        }
        if (try? ip("link", "add", "extra0", "type", "dummy")) == nil {
            try ip("link", "add", "extra0", "type", "veth", "peer", "name", "extra0-p")
            try ip("link", "set", "extra0-p", "up")
        }
        try ip("address", "add", "10.231.1.2/24", "dev", "veth-a")
        try ip("address", "add", "10.231.2.2/24", "dev", "veth-b")
        try ip("address", "add", "fd00:231:1::2/64", "dev", "veth-a", "nodad")
        try ip("address", "add", "fd00:231:2::2/64", "dev", "veth-b", "nodad")
        for link in ["veth-a-p", "veth-b-p", "veth-a", "veth-b", "extra0"] {
            try ip("link", "set", link, "up")
        }
        try ip("route", "add", "default", "via", "10.231.1.1", "dev", "veth-a")
        try ip("-6", "route", "add", "default", "via", "fd00:231:1::1", "dev", "veth-a")
    }
}

/// netmon-probe in a process of its own; its lines are read on a thread as they come.
final class NetmonProbe: @unchecked Sendable {
    private let process = Process()
    private let input = Pipe()
    private let events = Mutex<[NetNS.Event]>([])

    private init(executable: String, arguments: [String], quiet: Bool = false) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = input
        if quiet {
            process.standardError = FileHandle.nullDevice
            process.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
        }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let reader = output.fileHandleForReading
        let thread = Thread { [self] in
            var pending: [UInt8] = []
            while true {
                let chunk = reader.availableData
                let arrived = NetNS.monotonicNanoseconds()
                if chunk.isEmpty { break }
                pending += chunk
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = Data(pending[..<newline])
                    pending.removeSubrange(...newline)
                    guard var event = try? JSONDecoder().decode(NetNS.Event.self, from: line) else { continue }
                    event.arrivedNs = arrived
                    events.withLock { $0.append(event) }
                }
            }
        }
        thread.start()
    }

    /// `ip netns exec NAME netmon-probe --debounce-ms N`.
    static func start(in namespace: TestNamespace, debounceMs: Int = 75) throws -> NetmonProbe {
        try NetmonProbe(
            executable: NetNS.ip ?? "ip",
            arguments: ["netns", "exec", namespace.name, NetNS.probe.path, "--debounce-ms", "\(debounceMs)"])
    }

    /// netmon-probe in this namespace, allowed `limit` open files; no stderr, backtrace or core
    /// file, since the runtime itself may die of the limit.
    static func start(fileLimit limit: Int) throws -> NetmonProbe {
        try NetmonProbe(
            executable: "/bin/sh", arguments: ["-c", "ulimit -c 0; ulimit -n \(limit) && exec \"$0\"", NetNS.probe.path],
            quiet: true)
    }

    /// The next line, if one comes within `timeout`.
    func next(within timeout: Duration) async -> NetNS.Event? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let event = events.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return event }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Closes the probe's stdin, which ends it, and waits; its exit status.
    @discardableResult
    func stop() -> Int32 {
        try? input.fileHandleForWriting.close()
        let deadline = ContinuousClock.now + .seconds(3)
        while process.isRunning, ContinuousClock.now < deadline { usleep(5_000) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    var exitedNormally: Bool { process.terminationReason == .exit }
}

@Suite(.serialized, .enabled(if: NetNS.available, "needs root and `ip netns` (iproute2) to make network namespaces"))
struct NetworkNamespaceTests {
    let defaultA = NetNS.Route(interface: "veth-a", gateway: "10.231.1.1", addresses: ["10.231.1.2"], up: true)
    let defaultA6 = NetNS.Route(interface: "veth-a", gateway: "fd00:231:1::1", addresses: ["fd00:231:1::2"], up: true)

    /// Starts the probe in `namespace` and waits until it reports the uplinks as set up (a
    /// veth's carrier can come a moment after `ip link set up`).
    func startProbe(in namespace: TestNamespace) async throws -> NetmonProbe {
        try NetNS.requireProbe()
        let probe = try NetmonProbe.start(in: namespace)
        guard let ready = await probe.next(within: .seconds(60)), ready.event == "ready" else {
            probe.stop()
            throw NetNS.Failure(description: "netmon-probe did not say it was ready within 10 s")
        }
        var path = ready.path
        while path != NetNS.Path(ipv4: defaultA, ipv6: defaultA6) {
            guard let change = await probe.next(within: .seconds(60)) else {
                probe.stop()
                throw NetNS.Failure(description: "the namespace never reached the set-up path; last seen: \(String(describing: path))")
            }
            path = change.new
        }
        return probe
    }

    @Test func movingTheDefaultRouteIsReportedOnceEachTime() async throws {
        let namespace = try TestNamespace()
        defer { namespace.remove() }
        try namespace.makeTwoUplinks()
        let probe = try await startProbe(in: namespace)
        defer { probe.stop() }

        var toLine: [Double] = [], toProbe: [Double] = []
        for round in 0..<10 {
            let (from, to) = round % 2 == 0 ? ("a", "b") : ("b", "a")
            let gateway = to == "a" ? "10.231.1.1" : "10.231.2.1"
            let started = try namespace.timedIP("route", "replace", "default", "via", gateway, "dev", "veth-\(to)")
            let change = try #require(await probe.next(within: .seconds(60)), "no change line after moving the default route to veth-\(to)")
            #expect(change.event == "change")
            #expect(change.new?.ipv4?.interface == "veth-\(to)")
            #expect(change.new?.ipv4?.gateway == gateway)
            #expect(change.reasons == ["IPv4 default route moved from veth-\(from) to veth-\(to)"])
            #expect(change.new?.ipv6 == defaultA6)
            toLine.append(Double(change.arrivedNs - started) / 1e6)
            toProbe.append(Double(change.monotonicNs - started) / 1e6)
        }
        // Ends on veth-a. Now IPv6.
        _ = try namespace.timedIP("-6", "route", "replace", "default", "via", "fd00:231:2::1", "dev", "veth-b")
        let change = try #require(await probe.next(within: .seconds(60)), "no change line after moving the IPv6 default route")
        #expect(change.reasons == ["IPv6 default route moved from veth-a to veth-b"])
        #expect(change.new?.ipv6 == NetNS.Route(interface: "veth-b", gateway: "fd00:231:2::1", addresses: ["fd00:231:2::2"], up: true))
        // One route change, one line: the next line is about the next change (back to veth-a).
        _ = try namespace.timedIP("-6", "route", "replace", "default", "via", "fd00:231:1::1", "dev", "veth-a")
        let back = try #require(await probe.next(within: .seconds(60)), "no change line after moving the IPv6 default route back")
        #expect(back.reasons == ["IPv6 default route moved from veth-b to veth-a"])

        func summary(_ values: [Double]) -> String {
            let sorted = values.sorted()
            return String(format: "min %.1f, median %.1f, max %.1f ms", sorted[0], sorted[sorted.count / 2], sorted[sorted.count - 1])
        }
        print(
            "netmon latency, `ip route replace` started → change line read (debounce 75 ms, n=\(toLine.count)): \(summary(toLine)); → change out of the monitor's stream: \(summary(toProbe))"
        )
    }

    @Test func addressesCountOnlyOnTheDefaultInterface() async throws {
        let namespace = try TestNamespace()
        defer { namespace.remove() }
        try namespace.makeTwoUplinks()
        let probe = try await startProbe(in: namespace)
        defer { probe.stop() }

        try namespace.ip("address", "add", "10.231.1.3/24", "dev", "veth-a")
        let added = try #require(await probe.next(within: .seconds(60)), "no change line after an address on the default interface")
        #expect(added.reasons == ["IPv4 addresses on veth-a changed: +10.231.1.3"])
        #expect(added.new?.ipv4?.addresses == ["10.231.1.2", "10.231.1.3"])

        try namespace.ip("address", "add", "10.231.9.2/24", "dev", "extra0")
        try namespace.ip("address", "add", "fd00:231:9::2/64", "dev", "extra0", "nodad")
        try namespace.ip("address", "add", "10.231.2.3/24", "dev", "veth-b")
        // Addresses on other interfaces are no change: the next line is about the next real
        // change, not about the ones above.
        try namespace.ip("address", "del", "10.231.1.3/24", "dev", "veth-a")
        let removed = try #require(await probe.next(within: .seconds(60)))
        #expect(removed.reasons == ["IPv4 addresses on veth-a changed: -10.231.1.3"])
    }

    @Test func theDefaultInterfaceLosingItsCarrierIsAChange() async throws {
        let namespace = try TestNamespace()
        defer { namespace.remove() }
        try namespace.makeTwoUplinks()
        let probe = try await startProbe(in: namespace)
        defer { probe.stop() }

        try namespace.ip("link", "set", "veth-a-p", "down")
        let down = try #require(await probe.next(within: .seconds(60)), "no change line after veth-a lost its carrier")
        #expect(down.reasons == ["IPv4 default interface veth-a went down", "IPv6 default interface veth-a went down"])
        try namespace.ip("link", "set", "veth-a-p", "up")
        let up = try #require(await probe.next(within: .seconds(60)), "no change line after veth-a got its carrier back")
        #expect(up.new == NetNS.Path(ipv4: defaultA, ipv6: defaultA6))

        // Taking the interface itself down removes its routes.
        try namespace.ip("link", "set", "veth-a", "down")
        let gone = try #require(await probe.next(within: .seconds(60)), "no change line after veth-a went down")
        #expect(gone.new == NetNS.Path(ipv4: nil, ipv6: nil))
        #expect(gone.reasons == ["IPv4 default route via veth-a is gone", "IPv6 default route via veth-a is gone"])
    }
}
