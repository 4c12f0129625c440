import Foundation
import Glibc
import GuidanceProtocol
import Testing
import TestSupport

/// What keeps a fleet arriving at once from sinking the server, on the real binary: the in-flight
/// budget stops reading sockets when it is spent and reads on when room comes back; past
/// `server.maxUpgradesInProgress`, upgrades are answered 503 with a Retry-After drawn anew for each.
@Suite struct StormBoundsTests {
    /// A segment that finds the budget spent is not read from its socket (its bytes wait in the
    /// kernel's queue, not in the server) and is acknowledged once the segment holding the room
    /// is through.
    @Test func aSegmentWithNoRoomWaitsUnreadInTheNetworkAndIsAcknowledgedWhenRoomComesBack() async throws {
        // A busy machine may take long between two steps: no session here may end as idle.
        let server = try await ServerProcess(server: ["maxInFlightMegabytes": "1", "idleTimeoutSeconds": "3600"])
        let port = server.port
        // Car 1 announces a segment the size of the whole budget and sends half of it.
        let hog = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255) }
        let chunk = GuidanceProtocol.maxMessageBytes
        let hogChunks = stride(from: 0, to: hog.count, by: chunk).map { Array(hog[$0..<min($0 + chunk, hog.count)]) }
        let (first, _) = try await ServerHardeningTests.offPool { try ServerHardeningTests.session(port: port) }
        try first.sendText(
            ServerHardeningTests.header(
                seq: 1, durationMs: 5000, bytes: hog.count, chunks: hogChunks.count,
                sha: ServerHardeningTests.sha(hog)))
        for part in hogChunks.prefix(hogChunks.count / 2) { try first.sendFrame(.binary, part) }

        // Car 2 sends two whole real segments of three chunks each: there is no room for the first.
        let clip = await SampleSegment.clip(0, size: "480x270")
        let clipChunks = stride(from: 0, to: clip.count, by: chunk).map { Array(clip[$0..<min($0 + chunk, clip.count)]) }
        #expect(clipChunks.count == 3)
        let (second, _) = try await ServerHardeningTests.offPool { try ServerHardeningTests.session(port: port, token: "other-token") }
        let sender = Task.detached {
            for seq in [7, 8] {
                try second.sendText(
                    ServerHardeningTests.header(
                        seq: seq, durationMs: 5000, bytes: clip.count, chunks: clipChunks.count,
                        sha: ServerHardeningTests.sha(clip)))
                for part in clipChunks { try second.sendFrame(.binary, part) }
            }
        }

        // The server says a session waits for room, and the kernel holds what it did not read.
        var waiting = false, unread = 0
        for _ in 0..<600 where !(waiting && unread > 0) {
            waiting = try await Self.metric("guidance_inflight_waiting_sessions", port: port) == 1
            unread = Self.unreadBytes(serverPort: port, peer: second)
            if !(waiting && unread > 0) { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(waiting, "no session waits for room")
        #expect(unread > 0, "the server read car 2's segment with no room for it")
        // While it waits, the session tells car 2 (and any proxy between) it is alive: an
        // unsolicited pong, where nothing else could come.
        let heard = try await ServerHardeningTests.offPool { () -> [UInt8] in
            var opcodes: [UInt8] = []
            while let frame = try second.readFrame() {
                opcodes.append(frame.opcode)
                if frame.opcode == RawClient.Opcode.pong.rawValue { break }
            }
            return opcodes
        }
        #expect(heard.last == RawClient.Opcode.pong.rawValue, "car 2 heard \(heard) while it waited")

        // Car 1's segment ends (random bytes: not an MP4, refused), and its room goes to car 2.
        for part in hogChunks.dropFirst(hogChunks.count / 2) { try first.sendFrame(.binary, part) }
        let refused = try await ServerHardeningTests.offPool { try first.readTexts(until: "bad_segment") }
        #expect(refused.last?.contains("bad_segment") == true, "\(refused)")
        try await sender.value
        let answered = try await ServerHardeningTests.offPool { try second.readTexts(until: "\"seq\":8") }
        #expect(answered.filter { $0.contains("\"ack\"") }.count == 2, "\(answered)")
        var empty = false
        for _ in 0..<200 where !empty {
            let bytes = try await Self.metric("guidance_inflight_bytes", port: port)
            let waiting = try await Self.metric("guidance_inflight_waiting_sessions", port: port)
            empty = bytes == 0 && waiting == 0
            if !empty { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(empty, "room was not given back")
        withExtendedLifetime((first, second)) {}
        try await ServerHardeningTests.stillServes(server)
    }

    /// A session starts from its upgrade to its `welcome`: while one is starting, with room for
    /// one, the next upgrade is answered 503 with a Retry-After of 3 to 6 s, drawn for each; once
    /// the first has its welcome, an upgrade goes through again.
    @Test func pastMaxUpgradesInProgressAnUpgradeIsAnswered503WithAJitteredRetryAfter() async throws {
        let server = try await ServerProcess(server: [
            "maxUpgradesInProgress": "1", "retryAfterSeconds": "3", "idleTimeoutSeconds": "3600",
            "handshakeTimeoutMs": "600000"
        ])
        let port = server.port
        let starting = try RawClient(port: port)
        let upgraded = try await ServerHardeningTests.offPool { try starting.upgrade(token: "good-token") }
        #expect(upgraded.status == 101, "\(upgraded.head)")
        var waits: [Int] = []
        for _ in 0..<8 {
            let answer = try await ServerHardeningTests.offPool { try RawClient(port: port).upgrade(token: "other-token") }
            #expect(answer.status == 503, "\(answer.head)")
            if let wait = Self.retryAfter(answer.head) { waits.append(wait) }
        }
        #expect(waits.count == 8 && waits.allSatisfy { (3...6).contains($0) }, "\(waits)")
        #expect(Set(waits).count > 1, "every refused car was told the same wait: \(waits)")
        #expect(try await Self.metric("guidance_connections_refused_total{reason=\"starting\"}", port: port) == 8)

        // Its welcome ends the first session's start.
        try starting.sendText(ServerHardeningTests.hello)
        #expect(try await ServerHardeningTests.offPool { try starting.readTexts(until: "welcome") }.last?.contains("welcome") == true)
        let (next, welcome) = try await ServerHardeningTests.offPool { try ServerHardeningTests.session(port: port, token: "other-token") }
        #expect(welcome.contains("\"welcome\""))
        withExtendedLifetime((starting, next)) {}
    }

    /// A car that upgrades and never says `hello` cannot keep its place among the starting
    /// sessions by pinging: past the handshake timeout it is closed (4001) and the place is free.
    @Test func anUpgradeWithoutHelloIsClosedPingsOrNot() async throws {
        let server = try await ServerProcess(server: [
            "maxUpgradesInProgress": "1", "handshakeTimeoutMs": "1000", "idleTimeoutSeconds": "600"
        ])
        let port = server.port
        let holder = try RawClient(port: port, receiveTimeoutMs: 60_000)
        #expect(try await ServerHardeningTests.offPool { try holder.upgrade(token: "good-token").status } == 101)
        #expect(try await Self.closeCodeWhilePinging(holder, within: .seconds(120)) == Int(CloseCode.idle.rawValue))
        #expect(
            await eventually(within: .seconds(60), every: .milliseconds(50)) {
                (try? ServerHardeningTests.session(port: port, token: "other-token").welcome.contains("welcome")) == true
            }, "the place was not given back")
    }

    /// A car that announces a segment and then only pings (or trickles) cannot keep its room: past
    /// twice the idle timeout the session is closed (4001) and the room goes back.
    @Test func aSegmentThatDoesNotComeLosesItsRoomAndItsSession() async throws {
        // The shipped idle timeout (30 s), so the deadline is 60 s: a session starved of CPU on a
        // busy machine reads nothing meanwhile (not even pings), and a short idle timeout would
        // end it first.
        let server = try await ServerProcess(server: ["idleTimeoutSeconds": "30"])
        let port = server.port
        // The header right behind the welcome, on the same thread: no busy moment between them.
        let car = try await ServerHardeningTests.offPool { () -> RawClient in
            let (car, _) = try ServerHardeningTests.session(port: port, receiveTimeoutMs: 60_000)
            try car.sendText(
                ServerHardeningTests.header(seq: 1, durationMs: 5000, bytes: 500_000, chunks: 8, sha: String(repeating: "a", count: 64)))
            try car.sendFrame(.ping, Array("here".utf8))
            return car
        }
        // Alive all the while, so only the segment's deadline can end it.
        #expect(try await Self.closeCodeWhilePinging(car, within: .seconds(300)) == Int(CloseCode.idle.rawValue))
        #expect(server.process.stderr.contains("did not arrive within 60 s of having room"), "\(server.process.stderr.suffix(1500))")
        var empty = false
        for _ in 0..<200 where !empty {
            empty = try await Self.metric("guidance_inflight_bytes", port: port) == 0
            if !empty { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(empty, "the room was not given back")
    }

    /// A server stopped the way systemd stops it (SIGTERM) leaves nothing to report: its next start
    /// does not say its run ended without a shutdown (after `kill -9` it does: `MultiInstanceTests`).
    @Test func aRestartAfterAGracefulStopReportsNoUncleanEnd() async throws {
        let first = try await ServerProcess()
        // The run's mark, in its state folder, once it listens.
        let mark = first.folder.appendingPathComponent("guidance-server-\(first.port).running").path
        func marked() async -> Bool {
            await eventually(within: .seconds(60), every: .milliseconds(20)) { FileManager.default.fileExists(atPath: mark) }
        }
        #expect(await marked())
        #expect(first.process.stop(SIGTERM) == 0, "\(first.process.stderr.suffix(1500))")
        #expect(!FileManager.default.fileExists(atPath: mark), "a graceful stop left its mark")
        let again = try await ServerProcess(server: ["port": "\(first.port)"], folder: first.folder)
        #expect(await marked())
        #expect(!again.process.stderr.contains("ended without a shutdown"), "\(again.process.stderr.suffix(1500))")
        again.stop()
        let third = try await ServerProcess(server: ["port": "\(first.port)"], folder: first.folder)
        #expect(
            await eventually(within: .seconds(60), every: .milliseconds(20)) { third.process.stderr.contains("ended without a shutdown") },
            "\(third.process.stderr.suffix(1500))")
    }

    /// The close code the server ends `client`'s session with, while `client` pings every 200 ms
    /// (so that it is never idle) and answers the server's pings; `nil` if none within `within`.
    static func closeCodeWhilePinging(_ client: RawClient, within: Duration) async throws -> Int? {
        let pinging = Task.detached {
            while !Task.isCancelled {
                try? client.sendFrame(.ping, Array("here".utf8))
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        defer { pinging.cancel() }
        return try await ServerHardeningTests.offPool { () -> Int? in
            var seen: [UInt8] = []
            return try client.readUntilClose(answerPings: true, within: within, seen: &seen)
        }
    }

    /// The seconds of a response head's `Retry-After`.
    static func retryAfter(_ head: String) -> Int? {
        head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("retry-after:") }
            .flatMap { Int($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) }
    }

    /// A sample's value from the server's `/metrics` (the line that starts with `name` and a space).
    static func metric(_ name: String, port: Int) async throws -> Double? {
        let text = try await ServerHardeningTests.offPool { () -> String in
            let client = try RawClient(port: port)
            try client.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = recv(client.fd, &buffer, buffer.count, 0)
                guard n > 0 else { break }
                bytes += buffer[0..<n]
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// Bytes that arrived on the server's end of `peer`'s connection and that the server has not
    /// read: the kernel's receive queue (`/proc/net/tcp`, `rx_queue`).
    static func unreadBytes(serverPort: Int, peer: RawClient) -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(peer.fd, $0, &length) }
        }
        let peerPort = Int(UInt16(bigEndian: address.sin_port))
        let local = String(format: "0100007F:%04X", serverPort), remote = String(format: "0100007F:%04X", peerPort)
        // Read to its end: a /proc file says it is empty, and one read gives a page of it.
        guard let data = FileHandle(forReadingAtPath: "/proc/net/tcp")?.readDataToEndOfFile() else { return 0 }
        let table = String(decoding: data, as: UTF8.self)
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 4, fields[1] == local, fields[2] == remote else { continue }
            return Int(fields[4].split(separator: ":").last ?? "", radix: 16) ?? 0
        }
        return 0
    }
}
