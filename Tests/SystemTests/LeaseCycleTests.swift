import Foundation
import GuidanceProtocol
import Testing
import TestSupport

/// A car's day on a fleet's servers, many times over: a session, a handover to a second session
/// (on the other instance when there are two), a clean stop, and a new session. Each new session
/// must be welcomed and keep its lease: a segment it sends is acknowledged, not superseded.
@Suite struct LeaseCycleTests {
    static let hello = ClientMessage.hello(
        .init(
            device: "car-1", locale: "en-US", agent: "test",
            video: .init(width: 128, height: 72, fps: 10, segmentMs: 5000), stream: "day")
    ).encoded()

    /// The first session of a cycle is not read while the second is opened, so it answers no
    /// ping: on a busy machine that takes longer than the idle timeout, and the server would
    /// close it as idle (4001) before the handover closes it (4000), which is what is tested.
    static let patient = ["idleTimeoutSeconds": "3600"]

    /// A session on `port` that sends segment `seq` and reads until its ack (or whatever ends it).
    static func session(port: Int, seq: Int, clip: [UInt8]) throws -> (RawClient, texts: [String]) {
        let client = try RawClient(port: port, receiveTimeoutMs: 20_000)
        guard try client.upgrade(token: "good-token").status == 101 else { throw RawClient.Failure(description: "upgrade refused") }
        try client.sendText(hello)
        var texts = try client.readTexts(until: "welcome")
        try client.sendText(
            ServerHardeningTests.header(
                seq: seq, durationMs: 5000, bytes: clip.count,
                chunks: (clip.count + 65_535) / 65_536, sha: sha256Hex(clip)))
        try client.sendFrame(.binary, clip)
        texts += try client.readTexts(until: #""ack""#)
        return (client, texts)
    }

    /// 20 cycles over `servers` (one or two), sessions alternating between them.
    static func cycles(_ servers: [ServerProcess]) async throws {
        let clip = await SampleSegment.clip(0)
        for cycle in 0..<20 {
            let first = servers[cycle % servers.count], second = servers[(cycle + 1) % servers.count]
            let (old, opened) = try await ServerHardeningTests.offPool { try session(port: first.port, seq: 2 * cycle, clip: clip) }
            #expect(opened.last?.contains(#""ack""#) == true, "cycle \(cycle), first session: \(opened)")
            // The handover: a second session takes the lease; the first is told and closed with 4000.
            let (new, handedOver) = try await ServerHardeningTests.offPool {
                try session(port: second.port, seq: 2 * cycle + 1, clip: clip)
            }
            #expect(handedOver.last?.contains(#""ack""#) == true, "cycle \(cycle), second session: \(handedOver)")
            let oldClose = try await ServerHardeningTests.offPool { () -> Int? in
                var seen: [UInt8] = []
                return try old.readUntilClose(answerPings: true, seen: &seen)
            }
            #expect(oldClose == Int(CloseCode.superseded.rawValue), "cycle \(cycle)")
            // A clean stop: the agent closes, and waits for the server's close.
            let newClose = try await ServerHardeningTests.offPool { () -> Int? in
                try new.sendFrame(.close, [0x03, 0xE8])
                var seen: [UInt8] = []
                return try new.readUntilClose(answerPings: true, seen: &seen)
            }
            #expect(newClose == 1000, "cycle \(cycle)")
            // Its lease released before the next cycle's session: the server logged its end.
            let welcome = handedOver.compactMap { try? ServerMessage.decode($0) }.first
            guard case .welcome(let id, _) = welcome else {
                Issue.record("cycle \(cycle): no welcome in \(handedOver)")
                return
            }
            #expect(await eventually { second.process.stderr.contains("session \(id) ended") }, "cycle \(cycle)")
        }
    }

    @Test func aCarIsWelcomedEveryTimeAcrossTwoInstancesOnPostgreSQL() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let extra = "ledger: \(url)"
        let a = try await ServerProcess(server: Self.patient, extra: extra), b = try await ServerProcess(server: Self.patient, extra: extra)
        try await Self.cycles([a, b])
        #expect(a.isRunning && b.isRunning)
    }

    @Test func aCarIsWelcomedEveryTimeOnSQLite() async throws {
        let server = try await ServerProcess(server: Self.patient)
        try await Self.cycles([server])
        #expect(server.isRunning)
    }
}
