import Foundation
import HAL
import Logging
import Synchronization
import TestSupport
import Testing

/// The real kernel, read only, in this process's own network namespace.
@Suite(.serialized) struct RTNetlinkMonitorTests {
    let logger = {
        var logger = Logger(label: "test.netmon")
        logger.logLevel = .warning
        return logger
    }()

    /// The main table's IPv4 default route as /proc/net/route shows it (lowest metric).
    func procDefaultInterface() throws -> String? {
        let table = try String(contentsOfFile: "/proc/net/route", encoding: .utf8)
        let rows = table.split(separator: "\n").dropFirst().map { $0.split(whereSeparator: \.isWhitespace) }
        let defaults = rows.filter { $0.count > 7 && $0[1] == "00000000" && $0[7] == "00000000" && (Int($0[3], radix: 16) ?? 0) & 1 != 0 }
        return defaults.min { Int($0[6])! < Int($1[6])! }.map { String($0[0]) }
    }

    @Test func currentPathAgreesWithProcNetRoute() throws {
        let monitor = try RTNetlinkMonitor(logger: logger)
        defer { monitor.close() }
        #expect(monitor.currentPath.ipv4?.interfaceName == (try procDefaultInterface()))
    }

    /// Event descriptors of this process (the monitor wakes its thread with one; SwiftNIO's event
    /// loops have theirs too).
    static func eventDescriptors() -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == "anon_inode:[eventfd]" }
            .count
    }

    /// Sockets of this process that are NETLINK_ROUTE sockets (protocol 0 in /proc/net/netlink).
    static func routeSockets() -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let targets: [String] = fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
        let inodes = Set(targets.filter { $0.hasPrefix("socket:[") }.map { String($0.dropFirst(8).dropLast()) })
        let table = (try? String(contentsOfFile: "/proc/self/net/netlink", encoding: .utf8)) ?? ""
        // Columns: sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode; Eth 0 is NETLINK_ROUTE.
        let rows: [[Substring]] = table.split(separator: "\n").dropFirst().map { $0.split(whereSeparator: \.isWhitespace) }
        return rows.filter { row in row.count > 9 && row[1] == "0" && inodes.contains(String(row[9])) }.count
    }

    /// Threads named as the monitor names its own.
    static func monitorThreads() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)) == "netmon\n" }.count
    }

    /// The thread names itself as it starts, a moment after the monitor is made.
    static func monitorThreadsOnceStarted() async throws -> Int {
        for _ in 0..<1000 where monitorThreads() == 0 { try await Task.sleep(for: .milliseconds(1)) }
        return monitorThreads()
    }

    /// No monitor thread and no more route sockets than `sockets`, waited for.
    static func threadsAndSocketsGone(sockets: Int) async -> Bool {
        await eventually { monitorThreads() == 0 && routeSockets() == sockets }
    }

    @Test func openingAndClosingLeaksNoDescriptorAndNoThread() async throws {
        let events = Self.eventDescriptors(), sockets = Self.routeSockets()
        do {
            let monitor = try RTNetlinkMonitor(logger: logger)
            #expect(Self.routeSockets() == sockets + 2)
            #expect(try await Self.monitorThreadsOnceStarted() == 1)
            monitor.close()
        }
        for round in 0..<300 {
            let monitor = try RTNetlinkMonitor(logger: logger)
            switch round % 3 {
            case 0:
                monitor.close()
                monitor.close()
            case 1:
                // A consumer that goes away first; then the last reference ends the monitor.
                let consumer = Task { for await _ in monitor.changes() {} }
                consumer.cancel()
                await consumer.value
            default:
                _ = monitor.changes()
            }
        }
        // A monitor whose last reference went on its own thread ends that thread (and closes its
        // sockets) as the thread returns, and a joined thread can stay listed in /proc a moment
        // after the join on a busy machine. So the test waits for both to be gone; a leak never goes.
        #expect(
            await Self.threadsAndSocketsGone(sockets: sockets),
            "threads: \(Self.monitorThreads()), sockets: \(Self.routeSockets()) (before: \(sockets))")
        // Its two sockets are counted exactly above; its eventfd is one of a kind that only event
        // loops share. Other tests run at the same time and open and close files of every other
        // kind by the dozen, so only eventfds are counted here, and only growth: 300 rounds that
        // each leaked one would show far above this margin.
        #expect(Self.eventDescriptors() - events < 50, "eventfds before: \(events), after: \(Self.eventDescriptors())")
    }

    @Test func aMonitorKeptOnlyByItsStreamStopsWhenTheConsumerGoesAway() async throws {
        let sockets = Self.routeSockets()
        let started = Mutex(false)
        let consumer = Task { [logger] in
            let changes = try RTNetlinkMonitor(logger: logger).changes()
            started.withLock { $0 = true }
            for await _ in changes {}
        }
        while !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
        #expect(try await Self.monitorThreadsOnceStarted() == 1)
        #expect(Self.routeSockets() == sockets + 2)
        consumer.cancel()
        try await consumer.value
        #expect(
            await Self.threadsAndSocketsGone(sockets: sockets),
            "threads: \(Self.monitorThreads()), sockets: \(Self.routeSockets()) (before: \(sockets))")
    }

    @Test func closingEndsEveryStream() async throws {
        let monitor = try RTNetlinkMonitor(logger: logger)
        let consumers = (0..<3).map { _ in
            let changes = monitor.changes()
            return Task { for await _ in changes {} }
        }
        monitor.close()
        for consumer in consumers { await consumer.value }
        var late = monitor.changes().makeAsyncIterator()
        #expect(await late.next() == nil)
        #expect(await eventually { Self.monitorThreads() == 0 }, "threads: \(Self.monitorThreads())")
    }
}
