import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Hummingbird
import Logging
import NIOCore
import NIOWebSocket
import Synchronization
import TestSupport
import Testing
import WSClient

/// The reference server on loopback, driven by a plain WebSocket client speaking protocol v1.
@Suite struct GuidanceServerTests {
    static let script: [ScriptedAnalyzer.Item] = [
        .init(text: "보행자가 있습니다", lang: "ko-KR", clear: false, priority: .urgent),
        .init(text: nil, lang: nil, clear: true, priority: nil)
    ]

    /// Runs a server on a free port for the duration of `body`.
    func withServer(
        usage: Int? = nil, idleSeconds: Int = 30, clips: (any ClipStore)? = nil,
        _ body: @Sendable (Int) async throws -> Void
    ) async throws {
        let server = StreamServer(
            settings: .init(host: "127.0.0.1", port: 0, idleTimeoutSeconds: idleSeconds, usageSeconds: usage, clips: clips),
            tokens: StaticDeviceTokens(["good-token": "car-1", "other-token": "car-2"]),
            analyzer: ScriptedAnalyzer(items: Self.script, order: .order),
            ledger: SQLiteLedger(path: ":memory:", logger: Logger(label: "test-ledger")),
            logger: Logger(label: "test-server"))
        let port = Mutex(0)
        let app = try ServerApplication(stream: server).build { bound in port.withLock { $0 = bound } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await app.run() }
            while port.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
            try await body(port.withLock { $0 })
            group.cancelAll()
        }
    }

    static func hello(_ device: String = "car-1", stream: String? = nil) -> String {
        ClientMessage.hello(
            .init(
                device: device, locale: "ko-KR", agent: "test",
                video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000), stream: stream)
        ).encoded()
    }

    static func header(seq: Int, data: [UInt8], chunks: Int, sha: String? = nil, durationMs: Int = 5000) -> String {
        ClientMessage.segment(
            .init(
                seq: seq, capturedAt: "2026-11-22T04:17:17.569Z", durationMs: durationMs, frames: 50, bytes: data.count,
                sha256: sha ?? sha256Hex(data),
                chunks: chunks)
        ).encoded()
    }

    /// Sends `script` then collects server messages until `until` says stop (or the server closes).
    /// `then`: sends `more` once `when` holds for what came so far.
    func converse(
        port: Int, token: String = "good-token", send script: [WebSocketMessage],
        then: (when: @Sendable ([ServerMessage]) -> Bool, more: [WebSocketMessage])? = nil,
        until done: @escaping @Sendable ([ServerMessage]) -> Bool
    ) async throws -> (messages: [ServerMessage], close: WebSocketCloseFrame?) {
        let received = Mutex<[ServerMessage]>([])
        let close = try await WebSocketClient.connect(
            url: "ws://127.0.0.1:\(port)\(GuidanceProtocol.path)",
            configuration: .init(additionalHeaders: [.authorization: "Bearer \(token)"]),
            logger: Logger(label: "test-client")
        ) { inbound, outbound, _ in
            func write(_ messages: [WebSocketMessage]) async throws {
                for message in messages {
                    switch message {
                    case .text(let text): try await outbound.write(.text(text))
                    case .binary(let buffer): try await outbound.write(.binary(buffer))
                    }
                }
            }
            try await write(script)
            var next = then
            for try await message in inbound.messages(maxSize: 1 << 16) {
                guard case .text(let text) = message, let decoded = try? ServerMessage.decode(text) else { continue }
                let all = received.withLock {
                    $0.append(decoded); return $0
                }
                if let pending = next, pending.when(all) {
                    next = nil
                    try await write(pending.more)
                }
                if done(all) { return }
            }
        }
        return (received.withLock { $0 }, close)
    }

    @Test func aSegmentInChunksIsVerifiedAcknowledgedAndAnswered() async throws {
        try await withServer { port in
            // A real segment of three chunks.
            let data = await SampleSegment.clip(0, size: "480x270")
            let chunks = stride(from: 0, to: data.count, by: GuidanceProtocol.maxMessageBytes).map {
                WebSocketMessage.binary(ByteBuffer(bytes: data[$0..<min($0 + GuidanceProtocol.maxMessageBytes, data.count)]))
            }
            #expect(chunks.count == 3)
            let (messages, _) = try await converse(
                port: port, send: [.text(Self.hello()), .text(Self.header(seq: 4, data: data, chunks: 3))] + chunks,
                until: { $0.count >= 3 })
            guard case .welcome(_, let remaining) = messages.first else { Issue.record("no welcome: \(messages)"); return }
            #expect(remaining == nil)
            #expect(messages[1] == .ack(seq: 4))
            #expect(messages[2] == .guidance(.init(seq: 4, text: "보행자가 있습니다", lang: "ko-KR", clear: false, priority: .urgent)))
        }
    }

    @Test func aClipCutMidwayGoesOnFromWhatTheServerHoldsOnTheNextSession() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("clips-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let data = [UInt8]((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let clip = ClientMessage.Clip(
            id: "20261129T080230.822Z", kind: "parking", at: "2026-11-29T08:02:30.822Z", from: "2026-11-29T08:02:20.822Z",
            to: "2026-11-29T08:02:40.822Z", files: [.init(name: "a.mp4", bytes: data.count, sha256: sha256Hex(data))])
        @Sendable func part(_ offset: Int, _ count: Int) -> [WebSocketMessage] {
            [
                .text(ClientMessage.clipPart(.init(id: clip.id, name: "a.mp4", offset: offset, bytes: count)).encoded()),
                .binary(ByteBuffer(bytes: data[offset..<offset + count]))
            ]
        }
        @Sendable func answers(_ messages: [ServerMessage]) -> [ServerMessage.ClipHave] {
            messages.compactMap { if case .clipHave(let have) = $0 { have } else { nil } }
        }
        try await withServer(clips: FileClipStore(root: folder.path)) { port in
            // The first session ends after one part.
            let (first, _) = try await converse(
                port: port, send: [.text(Self.hello()), .text(ClientMessage.clip(clip).encoded())] + part(0, 65_536),
                until: { answers($0).count >= 2 })
            #expect(answers(first).map { $0.files.map(\.have) } == [[0], [65_536]])
            // The next announces again and hears where to go on from; a stale part is not written twice.
            let (second, _) = try await converse(
                port: port,
                send: [.text(Self.hello()), .text(ClientMessage.clip(clip).encoded())] + part(0, 65_536)
                    + part(65_536, 65_536) + part(131_072, data.count - 131_072),
                until: { answers($0).count >= 4 })
            #expect(answers(second).map { $0.files.map(\.have) } == [[65_536], [65_536], [131_072], [data.count]])
            #expect(answers(second).map(\.stored) == [false, false, false, true])
        }
        let stored = try Data(contentsOf: folder.appendingPathComponent("car-1/\(clip.id)/a.mp4"))
        #expect(sha256Hex(stored) == sha256Hex(data))
        // A server that keeps no clips says so, and the session goes on.
        try await withServer { port in
            let (messages, _) = try await converse(
                port: port, send: [.text(Self.hello()), .text(ClientMessage.clip(clip).encoded())],
                until: { $0.contains { if case .error = $0 { true } else { false } } })
            #expect(messages.contains { if case .error(.badClip, let text, nil) = $0 { text.contains("clips.dir") } else { false } })
        }
        // A store that cannot write says so without naming its paths, and the session goes on.
        try await withServer(clips: FileClipStore(root: "/dev/null/clips")) { port in
            let (messages, _) = try await converse(
                port: port, send: [.text(Self.hello()), .text(ClientMessage.clip(clip).encoded())],
                until: { $0.contains { if case .error = $0 { true } else { false } } })
            let said = messages.compactMap { if case .error(.badClip, let text, nil) = $0 { text } else { nil } }
            #expect(said == ["clip \(clip.id): the clip store failed; nothing of it was kept"])
        }
    }

    @Test func aWrongDigestIsABadSegmentAndTheSessionGoesOn() async throws {
        try await withServer { port in
            let data = await SampleSegment.clip(1)
            let (messages, _) = try await converse(
                port: port,
                send: [
                    .text(Self.hello()), .text(Self.header(seq: 1, data: data, chunks: 1, sha: String(repeating: "0", count: 64))),
                    .binary(ByteBuffer(bytes: data)),
                    .text("{not json"), .binary(ByteBuffer(bytes: [1, 2, 3])),
                    .text(#"{"type":"future-thing"}"#),
                    .text(Self.header(seq: 2, data: data, chunks: 1)), .binary(ByteBuffer(bytes: data))
                ],
                until: { $0.contains(.ack(seq: 2)) })
            let errors = messages.compactMap { message -> ServerMessage.ErrorCode? in
                if case .error(let code, _, _) = message { return code } else { return nil }
            }
            // The digest is the segment's fault; unreadable JSON and chunks without a header the message's.
            #expect(errors == [.badSegment, .badMessage, .badMessage])
            #expect(messages.contains(.ack(seq: 2)))
            #expect(!messages.contains(.ack(seq: 1)))
        }
    }

    @Test func aNewerConnectionOfTheSameDeviceSupersedesTheOlder() async throws {
        try await withServer { port in
            let welcomed = Mutex(false)
            let first = Task {
                try await converse(
                    port: port, send: [.text(Self.hello())],
                    until: { _ in
                        welcomed.withLock { $0 = true }
                        return false
                    })
            }
            // The second connection comes only once the first session is registered.
            while !welcomed.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
            let second = try await converse(port: port, send: [.text(Self.hello())], until: { $0.count >= 1 })
            guard case .welcome = second.messages.first else { Issue.record("second got \(second.messages)"); return }
            let (messages, close) = try await first.value
            #expect(close?.closeCode == .init(codeNumber: 4000))
            #expect(messages.contains { if case .error(.superseded, _, _) = $0 { true } else { false } })
        }
    }

    @Test func aBadTokenIsRefusedAtTheUpgradeWith401() async throws {
        try await withServer { port in
            let result = try await Command.executeAsync(
                "curl",
                [
                    "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                    "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                    "-H", "Authorization: Bearer wrong", "http://127.0.0.1:\(port)\(GuidanceProtocol.path)"
                ])
            let good = try await Command.executeAsync(
                "curl",
                [
                    // curl waits on the upgraded connection until -m: long enough for a busy machine's first answer.
                    "-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                    "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                    "-H", "Authorization: Bearer good-token", "http://127.0.0.1:\(port)\(GuidanceProtocol.path)"
                ])
            #expect(good.stdout == "101")
            #expect(result.stdout == "401", "refused before any WebSocket exists")
            await #expect(throws: WebSocketClientError.webSocketUpgradeFailed) {
                _ = try await converse(port: port, token: "wrong", send: [], until: { _ in true })
            }
        }
    }

    @Test func usageCountsDownAndExhaustionClosesWith4402() async throws {
        try await withServer(usage: 8) { port in
            let data = await SampleSegment.clip(2)
            let (messages, close) = try await converse(
                port: port,
                send: [
                    .text(Self.hello()), .text(Self.header(seq: 0, data: data, chunks: 1)), .binary(ByteBuffer(bytes: data)),
                    .text(Self.header(seq: 1, data: data, chunks: 1)), .binary(ByteBuffer(bytes: data))
                ],
                until: { _ in false })
            #expect(messages.first == .welcome(session: sessionID(messages), remainingSeconds: 8))
            #expect(messages.contains(.usage(remainingSeconds: 3)))
            #expect(messages.contains(.usage(remainingSeconds: 0)))
            #expect(close?.closeCode == .init(codeNumber: 4402))
        }
    }

    /// Session 1 sends segment 5 and stays open; session 2 of the same device (which supersedes it)
    /// sends `resend` as segment 5, then, once the server has answered it as `answered` says, a
    /// new segment 6 (the server analyses only the newest segment: sent at once, 6 would race 5).
    /// Returns both sessions' messages.
    func sendTwice(
        port: Int, stream: String?, resend: [UInt8]? = nil,
        answered: @escaping @Sendable ([ServerMessage]) -> Bool
    ) async throws -> (first: [ServerMessage], second: [ServerMessage]) {
        let data = await SampleSegment.clip(5)
        let next = await SampleSegment.clip(6)
        let resend = resend ?? data
        let charged = Mutex(false)
        let first = Task {
            try await converse(
                port: port,
                send: [
                    .text(Self.hello(stream: stream)), .text(Self.header(seq: 5, data: data, chunks: 1)),
                    .binary(ByteBuffer(bytes: data))
                ],
                until: { messages in
                    // Charged, and analysed (guidance goes out on its own, after the ack).
                    if messages.contains(where: { if case .usage = $0 { true } else { false } }), Self.guidance(messages, seq: 5) == 1 {
                        charged.withLock { $0 = true }
                    }
                    return false
                })
        }
        // The second session opens while the first one is still open, as after a network handover.
        while !charged.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
        let second = try await converse(
            port: port,
            send: [
                .text(Self.hello(stream: stream)), .text(Self.header(seq: 5, data: resend, chunks: 1)),
                .binary(ByteBuffer(bytes: resend))
            ],
            then: (when: answered, more: [.text(Self.header(seq: 6, data: next, chunks: 1)), .binary(ByteBuffer(bytes: next))]),
            until: { messages in
                // Done once segment 6, the last one, is charged and analysed.
                guard let acked = messages.firstIndex(of: .ack(seq: 6)) else { return false }
                return messages[acked...].contains { if case .usage = $0 { true } else { false } } && Self.guidance(messages, seq: 6) == 1
            })
        return (try await first.value.messages, second.messages)
    }

    private static func guidance(_ messages: [ServerMessage], seq: Int) -> Int {
        messages.count { if case .guidance(let guidance) = $0 { guidance.seq == seq } else { false } }
    }

    private static func usage(_ messages: [ServerMessage]) -> [Int] {
        messages.compactMap { if case .usage(let left) = $0 { left } else { nil } }
    }

    @Test func aReSentSegmentIsAcknowledgedAgainButNotAnalysedOrChargedTwice() async throws {
        try await withServer(usage: 60) { port in
            // Not analysed again: nothing but the ack is owed for 5, so 6 goes once 5 is acknowledged.
            let (first, second) = try await sendTwice(port: port, stream: "s-1") { $0.contains(.ack(seq: 5)) }
            #expect(first.contains(.ack(seq: 5)))
            #expect(Self.guidance(first, seq: 5) == 1)
            #expect(Self.usage(first) == [55])
            #expect(second.first == .welcome(session: sessionID(second), remainingSeconds: 55))
            #expect(second.contains(.ack(seq: 5)), "the re-send is acknowledged again")
            #expect(Self.guidance(second, seq: 5) == 0, "and not analysed again")
            #expect(Self.guidance(second, seq: 6) == 1)
            #expect(Self.usage(second) == [50], "only segment 6 is charged")
            #expect(!second.contains { if case .error = $0 { true } else { false } })
        }
    }

    @Test func withoutAStreamAReSentSegmentIsAnalysedAgain() async throws {
        try await withServer(usage: 60) { port in
            // Analysed again: 6 goes once 5's guidance came.
            let (first, second) = try await sendTwice(port: port, stream: nil) { Self.guidance($0, seq: 5) == 1 }
            #expect(first.contains(.ack(seq: 5)) && Self.usage(first) == [55])
            #expect(second.contains(.ack(seq: 5)))
            #expect(Self.guidance(first, seq: 5) == 1 && Self.guidance(second, seq: 5) == 1)
            #expect(Self.usage(second) == [50, 45])
        }
    }

    /// Device, stream and seq name one segment in the ledger: other bytes under the same name are
    /// refused, not analysed for free.
    @Test func aReSendWithOtherBytesIsRefused() async throws {
        try await withServer(usage: 60) { port in
            let (_, second) = try await sendTwice(port: port, stream: "s-1", resend: await SampleSegment.clip(9)) { messages in
                messages.contains { if case .error(.badSegment, _, 5) = $0 { true } else { false } }
            }
            #expect(!second.contains(.ack(seq: 5)))
            #expect(second.contains { if case .error(.badSegment, _, 5) = $0 { true } else { false } })
            #expect(Self.guidance(second, seq: 5) == 0)
            #expect(Self.usage(second) == [50])
        }
    }

    @Test func anImpossibleDurationIsABadSegmentAndCostsNothing() async throws {
        try await withServer(usage: 60) { port in
            let data = await SampleSegment.clip(3)
            let (messages, _) = try await converse(
                port: port,
                send: [
                    .text(Self.hello(stream: "s-1")),
                    .text(Self.header(seq: 1, data: data, chunks: 1, durationMs: -3_600_000)), .binary(ByteBuffer(bytes: data)),
                    .text(Self.header(seq: 2, data: data, chunks: 1, durationMs: .max)), .binary(ByteBuffer(bytes: data)),
                    .text(Self.header(seq: 3, data: data, chunks: 1)), .binary(ByteBuffer(bytes: data))
                ],
                until: { $0.contains(.usage(remainingSeconds: 55)) })
            let errors = messages.compactMap { message -> Int? in
                if case .error(.badSegment, _, let seq) = message { return seq } else { return nil }
            }
            #expect(errors == [1, 2])
            #expect(!messages.contains(.ack(seq: 1)) && !messages.contains(.ack(seq: 2)))
            #expect(Self.usage(messages) == [55])
        }
    }

    private func sessionID(_ messages: [ServerMessage]) -> String {
        if case .welcome(let id, _) = messages.first { return id }
        return ""
    }
}
