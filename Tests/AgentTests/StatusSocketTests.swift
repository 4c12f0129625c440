@testable import Agent
import Foundation
import Glibc
import Logging
import ServiceLifecycle
import TestSupport
import Testing

/// The control socket against clients that misbehave, over real Unix sockets: idle clients beyond
/// the cap, a client that never writes, an oversized request, and the socket file's mode.
@Suite struct StatusSocketTests {
    /// How long a test's own request keeps asking while it is turned away. Idle clients hold the
    /// slots for their read timeouts, one after the other: on a machine running every test at
    /// once, a client's default 10 s has run out before a slot came free.
    static let patience = Duration.seconds(60)

    /// A socket in a fresh folder answering `answer:REQUEST`; `body` runs while it serves.
    func withSocket<T>(
        limits: StatusSocket.Limits = .init(), logger: Logger = Logger(label: "status-socket-test"),
        _ body: (StatusSocket) async throws -> T
    ) async throws -> T {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sock-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let socket = StatusSocket(path: folder.appendingPathComponent("status.sock").path, logger: logger, limits: limits) {
            "answer:\($0)"
        }
        let serving = Task { try await socket.run() }
        defer { serving.cancel() }
        // Up once the file exists (the bind happens before the rename puts it there).
        while !FileManager.default.fileExists(atPath: socket.path) {
            try await Task.sleep(for: .milliseconds(10))
        }
        return try await body(socket)
    }

    @Test func theSocketFileIsOwnerOnlyAndNothingElseIsLeftBeside() async throws {
        // (ControlSocketAgentTests starts the agent with umask 0 for the same check.)
        try await withSocket { (socket: StatusSocket) async throws in
            var info = stat()
            #expect(lstat(socket.path, &info) == 0)
            #expect(info.st_mode & S_IFMT == S_IFSOCK)
            #expect(info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
            let folder = (socket.path as NSString).deletingLastPathComponent
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["status.sock"])
            #expect(try await StatusSocket.ask("status", path: socket.path, patience: Self.patience) == "answer:status\n")
        }
    }

    @Test func idleClientsBeyondTheCapAreTurnedAwayClosedAndARealRequestIsStillAnswered() async throws {
        let limits = StatusSocket.Limits(connections: 4, readTimeout: .seconds(2), requestBytes: 4096)
        let lines = LogLines()
        try await withSocket(limits: limits, logger: lines.logger) { socket in
            let idle = try (0..<(limits.connections * 4)).map { _ in try #require(UnixClient(path: socket.path)) }
            // A real client, while all of them are connected and silent.
            #expect(try await StatusSocket.ask("status", path: socket.path, patience: Self.patience) == "answer:status\n")
            // Every idle client ends closed: turned away at once with the busy line, or cut off
            // with nothing once it has held its slot for the read timeout.
            var busy = 0
            for client in idle {
                let received = try #require(await client.readUntilClosed(), "an idle client was never closed")
                if received.isEmpty { continue }
                #expect(received == StatusSocket.busyReply + "\n")
                busy += 1
            }
            #expect(busy >= 1)
            #expect(busy <= idle.count - limits.connections, "the cap is \(limits.connections), not fewer")
            let refusals = socket.refusals
            #expect(refusals.overCap >= busy)
            #expect(refusals.timedOut >= 1)
            // Counted each, logged at most once a minute.
            let logged = lines.count(containing: "over the cap of 4")
            #expect(logged >= 1 && logged < refusals.overCap + refusals.timedOut, "\(lines.all)")
        }
    }

    @Test func aClientThatNeverWritesIsClosed() async throws {
        try await withSocket(limits: .init(readTimeout: .milliseconds(300))) { socket in
            let client = try #require(UnixClient(path: socket.path))
            #expect(await client.readUntilClosed() == "")
            #expect(socket.refusals.timedOut == 1)
            // The slot is free again.
            #expect(try await StatusSocket.ask("status", path: socket.path, patience: Self.patience) == "answer:status\n")
        }
    }

    @Test(arguments: [false, true])
    func anOversizedRequestGetsAClearError(endsInNewline: Bool) async throws {
        try await withSocket { socket in
            let client = try #require(UnixClient(path: socket.path))
            client.send(String(repeating: "x", count: 5000) + (endsInNewline ? "\n" : ""))
            let reply = try #require(await client.readUntilClosed())
            #expect(reply == #"{"error":"request longer than 4096 bytes; send one line: `status`, `say-status` or `protect …`"}"# + "\n")
            #expect(socket.refusals.tooLong == 1)
            // A request at the limit is still read.
            #expect(
                try await StatusSocket.ask(String(repeating: "y", count: 4096), path: socket.path, patience: Self.patience).count == 4096
                    + 8)
        }
    }

    @Test func cancellingRemovesTheSocketFileAndAGracefulShutdownEndsItToo() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sock-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("status.sock").path
        let socket = StatusSocket(path: path, logger: Logger(label: "status-socket-test")) { $0 }

        let serving = Task { try await socket.run() }
        while !FileManager.default.fileExists(atPath: path) { try await Task.sleep(for: .milliseconds(10)) }
        serving.cancel()
        try await serving.value
        #expect(!FileManager.default.fileExists(atPath: path))

        // In a service group: SIGTERM's graceful shutdown ends it, then the group is done.
        let group = ServiceGroup(services: [socket], logger: Logger(label: "status-socket-test"))
        let running = Task { try await group.run() }
        while !FileManager.default.fileExists(atPath: path) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(try await StatusSocket.ask("ping", path: path, patience: Self.patience) == "ping\n")
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func aLeftoverSocketIsReplacedButAnyOtherFileIsRefusedAndKept() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sock-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("status.sock").path

        try Data("notes".utf8).write(to: URL(fileURLWithPath: path))
        let refused = StatusSocket(path: path, logger: Logger(label: "status-socket-test")) { $0 }
        await #expect { try await refused.run() } throws: { "\($0)".contains("exists and is not a socket") }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "notes")

        // A socket an earlier run left (its listener gone) is replaced.
        try FileManager.default.removeItem(atPath: path)
        let earlier = StatusSocket(path: path, logger: Logger(label: "status-socket-test")) { _ in "earlier" }
        let first = Task { try await earlier.run() }
        while !FileManager.default.fileExists(atPath: path) { try await Task.sleep(for: .milliseconds(10)) }
        var stale = stat()
        #expect(lstat(path, &stale) == 0)
        // Another run takes the path over; the earlier one, ending, leaves the new file alone.
        let later = StatusSocket(path: path, logger: Logger(label: "status-socket-test")) { _ in "later" }
        let second = Task { try await later.run() }
        var replaced = stat()
        while lstat(path, &replaced) != 0 || replaced.st_ino == stale.st_ino { try await Task.sleep(for: .milliseconds(10)) }
        first.cancel()
        try await first.value
        #expect(try await StatusSocket.ask("status", path: path, patience: Self.patience) == "later\n")
        second.cancel()
        try await second.value
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}
