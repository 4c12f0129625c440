import Foundation
import Glibc
import GuidanceProtocol
import Testing
import TestSupport

/// How connections end, with the built `guidance-server` in its own process: peers that go silent
/// after the server closes them, kept-alive plain requests, one device opening many connections.
/// Each test asks what another device would notice: whether it still gets a connection.
@Suite struct ConnectionLifecycleTests {
    /// Upgrades with `token` and reads the status; the client stays open.
    static func upgrade(port: Int, token: String) throws -> (RawClient, status: Int) {
        let client = try RawClient(port: port, receiveTimeoutMs: 10_000)
        return (client, try client.upgrade(token: token).status)
    }

    /// Whether a fresh connection of `token` is upgraded (101), tried until it is or 60 s pass.
    static func eventuallyUpgrades(port: Int, token: String) async -> Bool {
        await eventually(within: .seconds(60), every: .milliseconds(250)) {
            (try? await ServerHardeningTests.offPool { try upgrade(port: port, token: token).status == 101 }) ?? false
        }
    }

    /// Three peers the server closes itself (two idle, one superseded) and that then say and read
    /// nothing, one of them half way through a segment, on a server with room for three
    /// connections: once their close deadline passes, another device's upgrade is let in.
    @Test func silentPeersNoLongerCostAnotherDeviceItsSlot() async throws {
        let server = try await ServerProcess(server: ["maxConnections": "3", "idleTimeoutSeconds": "2", "closeTimeoutMs": "500"])
        let clip = await SampleSegment.clip(0, size: "320x180")
        let silent = try await ServerHardeningTests.offPool { () -> [RawClient] in
            let (first, _) = try ServerHardeningTests.session(port: server.port)
            let (second, _) = try ServerHardeningTests.session(port: server.port, token: "other-token")
            // Half a segment: its buffer is held until the session goes.
            try second.sendText(
                ServerHardeningTests.header(
                    seq: 1, durationMs: 5000, bytes: clip.count,
                    chunks: (clip.count + 65_535) / 65_536, sha: sha256Hex(clip)))
            try second.sendFrame(.binary, Array(clip.prefix(65_536)))
            // The same device again: the first is superseded.
            let (third, _) = try ServerHardeningTests.session(port: server.port)
            return [first, second, third]
        }
        // Nobody reads or answers anything from here on.
        #expect(
            await Self.eventuallyUpgrades(port: server.port, token: "other-token"),
            "the silent peers kept their slots: \(server.process.stderr.suffix(2000))")
        // And the server did end each of them: their sockets read end-of-file.
        for client in silent { #expect(client.isClosedByPeer()) }
        #expect(server.isRunning)
        withExtendedLifetime(silent) {}
    }

    /// A scraper that keeps its /metrics connection open after the answer: the server closes it
    /// once it has been idle as long as a first request may take.
    @Test func keptAliveRequestsDoNotFillTheServer() async throws {
        let server = try await ServerProcess(server: ["maxConnections": "2", "handshakeTimeoutMs": "1000"])
        let scrapers = try await ServerHardeningTests.offPool { () -> [RawClient] in
            try (0..<2).map { _ in
                let client = try RawClient(port: server.port, receiveTimeoutMs: 10_000)
                try client.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n")
                guard try client.readHead().status == 200 else { throw RawClient.Failure(description: "no metrics") }
                return client
            }
        }
        #expect(
            await Self.eventuallyUpgrades(port: server.port, token: "good-token"),
            "kept-alive connections kept their slots: \(server.process.stderr.suffix(2000))")
        for client in scrapers { #expect(client.isClosedByPeer()) }
        withExtendedLifetime(scrapers) {}
    }

    /// One token cannot take more than `server.maxConnectionsPerDevice` connections: the next is
    /// 429 with Retry-After, another device still gets in, and a slot freed is usable again.
    @Test func oneDeviceCannotHoldMoreThanItsConnections() async throws {
        // Upgraded, never a hello: a busy machine may take a while between them, and a session
        // that has not started within the handshake timeout is closed.
        let server = try await ServerProcess(server: ["maxConnectionsPerDevice": "2", "handshakeTimeoutMs": "600000"])
        let (held, statuses, other) = try await ServerHardeningTests.offPool { () -> ([RawClient], [Int], Int) in
            var held: [RawClient] = [], statuses: [Int] = []
            for _ in 0..<3 {
                let (client, status) = try Self.upgrade(port: server.port, token: "good-token")
                statuses.append(status)
                held.append(client)
            }
            return (held, statuses, try Self.upgrade(port: server.port, token: "other-token").status)
        }
        #expect(statuses == [101, 101, 429])
        #expect(other == 101)
        // One of the two goes: the device may connect again.
        _ = withExtendedLifetime(held) { held.first.map { shutdown($0.fd, Int32(SHUT_RDWR)) } }
        #expect(await Self.eventuallyUpgrades(port: server.port, token: "good-token"))
        let scraped = try await Command.executeAsync("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(server.port)/metrics"]).stdout
        #expect(scraped.contains(#"reason="device_capacity""#), "\(scraped)")
    }

    /// A peer that sends what the server answers (`{}`, a bad message each) and never reads: the
    /// server's answers back up, so it stops reading that peer too, and nothing more is heard. The
    /// idle watch's ping and close each have the close deadline, so the session ends and the
    /// connection is closed. Before, the ping waited for room forever, and the session kept its
    /// connection (and one of its device's slots) for as long as the peer stayed.
    @Test func aPeerThatNeverReadsIsLetGo() async throws {
        let server = try await ServerProcess(server: ["idleTimeoutSeconds": "2", "closeTimeoutMs": "500"])
        let client = try await ServerHardeningTests.offPool { () -> RawClient in
            let (client, _) = try ServerHardeningTests.session(port: server.port)
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            // A small receive buffer, so the server's answers back up after a few kilobytes however
            // slowly a busy machine lets it answer (with the buffers a kernel grows by itself, that
            // took tens of megabytes: more than 30 s of answers on a busy CI machine).
            var small: Int32 = 4096
            setsockopt(client.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            // 1000 `{}` text frames at a time, masked with a zero key; sends stop (time out) once
            // every buffer on the way is full.
            let frame: [UInt8] = [0x81, 0x82, 0, 0, 0, 0, UInt8(ascii: "{"), UInt8(ascii: "}")]
            let batch = Array(repeatElement(frame, count: 1000).joined())
            for _ in 0..<10_000 {
                guard (try? client.send(batch)) != nil else { break }
            }
            return client
        }
        // The bound only keeps a broken server from hanging the run: the session ends about 2 s
        // (the idle timeout) after the server stopped reading.
        #expect(
            await eventually(within: .seconds(120), every: .milliseconds(250)) {
                let scraped = try? await Command.executeAsync("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(server.port)/metrics"]).stdout
                let gauge = scraped?.split(separator: "\n").first { $0.hasPrefix("guidance_sessions ") }
                return gauge.flatMap { Double($0.split(separator: " ").last ?? "") } == 0
            }, "the session of a peer that never reads was kept: \(server.process.stderr.suffix(2000))")
        #expect(server.isRunning)
        withExtendedLifetime(client) {}
    }
}
