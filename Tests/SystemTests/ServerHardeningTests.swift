import Dispatch
import Foundation
import Glibc
import Synchronization
import GuidanceProtocol
import PropertyBased
import Testing
import TestSupport

/// What an audit of the released server found, each as it was found: the built `guidance-server`
/// in its own process on loopback, driven by a bare socket that sends whatever numbers it likes.
/// A trap is a dead process; every test ends by checking the server still answers.
@Suite struct ServerHardeningTests {
    static func sha(_ data: [UInt8]) -> String { sha256Hex(data) }

    static let hello = ClientMessage.hello(
        .init(
            device: "car-1", locale: "en-US", agent: "test", video: .init(width: 320, height: 180, fps: 10, segmentMs: 5000))
    ).encoded()

    /// A header as JSON text, with any numbers (the protocol types would not let some of them through).
    static func header(seq: Int, durationMs: Int, bytes: Int, chunks: Int?, sha: String, frames: Int = SampleSegment.clipFrames) -> String {
        #"{"type":"segment","seq":\#(seq),"capturedAt":"2026-11-22T04:17:17.569Z","durationMs":\#(durationMs),"frames":\#(frames),"bytes":\#(bytes),"sha256":"\#(sha)""#
            + (chunks.map { #","chunks":\#($0)"# } ?? "") + "}"
    }

    /// Runs blocking socket work on a thread of its own, not on the few threads every test's tasks share.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }

    /// A client upgraded with a good token that has sent `hello` and read `welcome`.
    static func session(port: Int, token: String = "good-token", receiveTimeoutMs: Int = 5000) throws -> (RawClient, welcome: String) {
        let client = try RawClient(port: port, receiveTimeoutMs: receiveTimeoutMs)
        let (status, head) = try client.upgrade(token: token)
        guard status == 101 else { throw RawClient.Failure(description: "upgrade answered \(status): \(head)") }
        try client.sendText(hello)
        let welcome = try client.readTexts(until: "welcome").last ?? ""
        return (client, welcome)
    }

    /// The server is alive and serves a new session.
    static func stillServes(_ server: ServerProcess) async throws {
        #expect(server.isRunning, "the server died: \(server.process.stderr.suffix(3000))")
        let welcome = try await offPool { try session(port: server.port).welcome }
        #expect(welcome.contains("\"welcome\""), "after the abuse, a new session got: \(welcome)")
    }

    /// The shipped configuration's analyzer (vision) once died on a frame count no clip has
    /// (`Int32(frames / 4)`). A header's numbers must agree with the MP4 itself, and the analyzer
    /// spreads its looks by the file's own count: 10 billion frames, 1 frame, a 1-byte body are
    /// each a bad segment; the real clip with its real count is analysed.
    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aFrameCountNoClipHasIsABadSegmentNotACrash() async throws {
        let server = try await ServerProcess(analyzer: ["kind": "vision", "visionFrames": "4"])
        let clip = await SampleSegment.clip(1)
        let texts = try await Self.offPool { () -> [String] in
            let (client, _) = try Self.session(port: server.port, receiveTimeoutMs: 30_000)
            let byte: [UInt8] = [0]
            try client.sendText(Self.header(seq: 1, durationMs: 5000, bytes: 1, chunks: 1, sha: Self.sha(byte), frames: 10_000_000_000))
            try client.sendFrame(.binary, byte)
            for (seq, frames) in [(2, 10_000_000_000), (3, 1), (4, Int.max)] {
                try client.sendText(
                    Self.header(seq: seq, durationMs: 5000, bytes: clip.count, chunks: 1, sha: Self.sha(clip), frames: frames))
                try client.sendFrame(.binary, clip)
            }
            try client.sendText(Self.header(seq: 5, durationMs: 5000, bytes: clip.count, chunks: 1, sha: Self.sha(clip)))
            try client.sendFrame(.binary, clip)
            return try client.readTexts(until: #""guidance""#)
        }
        let messages = texts.compactMap { try? ServerMessage.decode($0) }
        let refused = messages.compactMap { message -> Int? in
            if case .error(.badSegment, _, let seq) = message { return seq } else { return nil }
        }
        #expect(refused == [1, 2, 3, 4], "\(texts)")
        #expect(messages.contains(.ack(seq: 5)))
        #expect(messages.contains { if case .guidance(let guidance) = $0 { guidance.seq == 5 } else { false } }, "\(texts)")
        try await Self.stillServes(server)
    }

    @Test func aHugeOrNegativeDurationIsRefusedAndCostsNothing() async throws {
        let server = try await ServerProcess(extra: "usage:\n  remainingSeconds: 100")
        let data = await SampleSegment.clip(9)
        let texts = try await Self.offPool { () -> [String] in
            let (client, welcome) = try Self.session(port: server.port)
            var texts = [welcome]
            // Int.max once overflowed the rounding to seconds; a negative one added usage.
            for (seq, duration) in [(1, Int.max), (2, -5000), (3, 0), (4, 10_001)] {
                try client.sendText(Self.header(seq: seq, durationMs: duration, bytes: data.count, chunks: 1, sha: Self.sha(data)))
                try client.sendFrame(.binary, data)
            }
            try client.sendText(Self.header(seq: 5, durationMs: 5000, bytes: data.count, chunks: 1, sha: Self.sha(data)))
            try client.sendFrame(.binary, data)
            texts += try client.readTexts(until: "\"usage\"")
            return texts
        }
        let messages = texts.compactMap { try? ServerMessage.decode($0) }
        guard case .welcome(_, remainingSeconds: 100) = messages.first else {
            Issue.record("first message: \(texts.first ?? "none")")
            return
        }
        let refused = messages.compactMap { message -> Int? in
            if case .error(.badSegment, _, let seq) = message { return seq } else { return nil }
        }
        #expect(refused == [1, 2, 3, 4], "\(texts)")
        #expect(!messages.contains { if case .ack(let seq) = $0 { seq < 5 } else { false } })
        #expect(messages.contains(.ack(seq: 5)))
        // Only the one good segment was charged: 5 s of the 100.
        #expect(messages.last == .usage(remainingSeconds: 95), "\(texts)")
        // And the operator sees it in /metrics (Prometheus text).
        let scraped = try await Command.executeAsync("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(server.port)/metrics"]).stdout
        #expect(scraped.contains(#"guidance_segments_rejected_total{reason="duration"} 4"#), "\(scraped)")
        #expect(scraped.contains("guidance_segments_verified_total 1"), "\(scraped)")
        #expect(scraped.contains(#"guidance_ledger_writes_total{result="charged"} 1"#), "\(scraped)")
        // Where an ack's time goes: one acknowledged segment, one charge (the refused ones are neither).
        #expect(scraped.contains("guidance_segment_ack_duration_seconds_count 1"), "\(scraped)")
        #expect(scraped.contains("guidance_ledger_charge_duration_seconds_count 1"), "\(scraped)")
        try await Self.stillServes(server)
    }

    @Test func aHeaderCannotReserveMemoryAndTheLargestSegmentIsReassembledOnce() async throws {
        let server = try await ServerProcess(server: ["maxSegmentBytes": "\(8 << 20)"])
        let before = server.rssKiB
        // A real clip, padded with an MP4 `free` box to exactly the limit.
        let big = SampleSegment.tagged(await SampleSegment.clip(0), 1, bytes: 8 << 20)
        let chunk = GuidanceProtocol.maxMessageBytes
        let (texts, cpu) = try await Self.offPool { () -> ([String], Double) in
            let (client, _) = try Self.session(port: server.port, receiveTimeoutMs: 20_000)
            // 64 MiB announced: refused before a byte is buffered. 8 MiB + 1: over the limit.
            try client.sendText(Self.header(seq: 1, durationMs: 5000, bytes: 64 << 20, chunks: 1024, sha: Self.sha([])))
            try client.sendText(Self.header(seq: 2, durationMs: 5000, bytes: (8 << 20) + 1, chunks: 129, sha: Self.sha([])))
            // A chunk count that does not match the bytes.
            try client.sendText(Self.header(seq: 3, durationMs: 5000, bytes: 100_000, chunks: 1, sha: Self.sha([])))
            let refusedBeforeData = try client.readTexts(until: "\"seq\":3")
            // The largest segment allowed, in 128 chunks of 64 KiB.
            let cpuBefore = server.cpuSeconds
            try client.sendText(Self.header(seq: 4, durationMs: 5000, bytes: big.count, chunks: big.count / chunk, sha: Self.sha(big)))
            for start in stride(from: 0, to: big.count, by: chunk) {
                try client.sendFrame(.binary, Array(big[start..<(start + chunk)]))
            }
            let acked = try client.readTexts(until: #""ack""#)
            return (refusedBeforeData + acked, server.cpuSeconds - cpuBefore)
        }
        let messages = texts.compactMap { try? ServerMessage.decode($0) }
        let refused = messages.compactMap { message -> Int? in
            if case .error(.badSegment, _, let seq) = message { return seq } else { return nil }
        }
        #expect(refused == [1, 2, 3], "\(texts)")
        #expect(messages.contains(.ack(seq: 4)), "\(texts)")
        let grown = (server.peakRSSKiB - before) / 1024
        print(
            "8 MiB segment in 128 chunks: server CPU \(cpu) s; RSS \(before / 1024) MiB before, peak \(server.peakRSSKiB / 1024) MiB (+\(grown))"
        )
        // One segment of 8 MiB held once (plus the socket's buffers), not 64 MiB reserved: a bound on memory, not on time.
        #expect(grown < 48, "peak RSS grew by \(grown) MiB")
        try await Self.stillServes(server)
    }

    @Test func connectionsThatNeverFinishTheirUpgradeAreClosedAfterTheHandshakeTimeout() async throws {
        let server = try await ServerProcess(server: ["handshakeTimeoutMs": "400"])
        let request = RawClient.upgradeRequest(token: "good-token")
        // Silent; half a request line; a head without its blank line; one without a token, unfinished.
        let openings = ["", "GET /v1/st", String(request.dropLast(2)), "GET /v1/stream HTTP/1.1\r\nHost: x\r\n"]
        let started = ContinuousClock.now
        let closed = try await withThrowingTaskGroup(of: Bool.self) { group in
            for opening in openings {
                group.addTask {
                    try await Self.offPool {
                        let client = try RawClient(port: server.port, receiveTimeoutMs: 15_000)
                        if !opening.isEmpty { try client.send(opening) }
                        return client.isClosedByPeer()
                    }
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        print("4 unfinished upgrades closed by the server after \(ContinuousClock.now - started) (handshake timeout 400 ms)")
        #expect(closed == [true, true, true, true])
        // A whole request in time still upgrades.
        try await Self.stillServes(server)
    }

    @Test func pastMaxConnectionsTheServerAnswers503WithRetryAfter() async throws {
        let server = try await ServerProcess(server: ["maxConnections": "2"])
        let (status, head) = try await Self.offPool { () -> (Int, String) in
            // Two devices: a second session of one device would supersede (and so free) the first.
            let (first, _) = try Self.session(port: server.port)
            let (second, _) = try Self.session(port: server.port, token: "other-token")
            let answer = try RawClient(port: server.port).upgrade(token: "good-token")
            withExtendedLifetime((first, second)) {}
            return answer
        }
        #expect(status == 503, "\(head)")
        // server.retryAfterSeconds (2) to twice it, drawn for each refusal.
        #expect(StormBoundsTests.retryAfter(head).map { (2...4).contains($0) } == true, "\(head)")
        // Those two are closed now (their sockets with the block above): a new connection is served again.
        var served = false
        for _ in 0..<50 where !served {
            served = (try? await Self.offPool { try Self.session(port: server.port).welcome.contains("welcome") }) ?? false
            if !served { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(served)
    }

    /// An agent paused by 4402 sends nothing, but answers pings: it stays. One that answers nothing
    /// is closed with 4001.
    @Test func anAgentThatOnlyAnswersPingsStaysAndOneThatDoesNotIsClosedIdle() async throws {
        let server = try await ServerProcess(server: ["idleTimeoutSeconds": "2"], extra: "usage:\n  remainingSeconds: 5")
        let data = await SampleSegment.clip(3)
        // Spend the 5 s: the server says 0 and closes with 4402.
        let quotaClose = try await Self.offPool { () -> Int? in
            let (client, _) = try Self.session(port: server.port)
            try client.sendText(Self.header(seq: 1, durationMs: 5000, bytes: data.count, chunks: 1, sha: Self.sha(data)))
            try client.sendFrame(.binary, data)
            var seen: [UInt8] = []
            return try client.readUntilClose(answerPings: true, seen: &seen)
        }
        #expect(quotaClose == Int(CloseCode.quotaExhausted.rawValue))
        async let answering = Self.offPool { () -> (String, Int?, [UInt8]) in
            let (client, welcome) = try Self.session(port: server.port, receiveTimeoutMs: 7000)
            var seen: [UInt8] = []
            // Three idle timeouts: no close.
            let close = try client.readUntilClose(answerPings: true, within: .seconds(6), seen: &seen)
            return (welcome, close, seen)
        }
        async let silent = Self.offPool { () -> Int? in
            // Another device, so that neither session supersedes the other.
            let (client, _) = try Self.session(port: server.port, token: "other-token", receiveTimeoutMs: 10_000)
            var seen: [UInt8] = []
            return try client.readUntilClose(answerPings: false, seen: &seen)
        }
        let (welcome, close, seen) = try await answering
        #expect(welcome.contains(#""remainingSeconds":0"#), "\(welcome)")
        #expect(close == nil, "the session that answered pings was closed with \(close.map(String.init) ?? "-")")
        #expect(seen.contains(RawClient.Opcode.ping.rawValue), "the server never pinged the quiet session")
        let silentClose = try await silent
        #expect(silentClose == Int(CloseCode.idle.rawValue), "\(silentClose.map(String.init) ?? "no close")")
        try await Self.stillServes(server)
    }

    @Test(arguments: [
        ("mode", "good-token: car-1\n", 0o644, "chmod 600"),
        ("empty", "", 0o600, "at least one entry"),
        ("not a mapping", "- a\n- b\n", 0o600, "YAML mapping")
    ])
    func aTokensFileThatIsNotPrivateOrNotAMappingExits78(name: String, content: String, mode: Int, says: String) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tokens-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try ServerProcess.write(folder, "tokens.yaml", content, mode: mode)
        try ServerProcess.write(folder, "script.yaml", "- clear: true\n")
        try ServerProcess.write(
            folder, "server.yaml",
            """
            server:
              port: 0
              tokensFile: \(folder.appendingPathComponent("tokens.yaml").path)
            analyzer:
              kind: scripted
              scriptFile: \(folder.appendingPathComponent("script.yaml").path)

            """)
        let result = try await Command.executeAsync(
            Spawned.buildFolder.appendingPathComponent("guidance-server").path,
            ["--config", folder.appendingPathComponent("server.yaml").path])
        #expect(result.status == 78, "\(name): exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("server.tokensFile") && result.stderr.contains(says), "\(name): \(result.stderr)")
        #expect(!result.stderr.contains("good-token"), "the error printed a token")
    }

    /// Random client messages, numbers from all of Int's range and beyond, random frames of any
    /// kind, against one running server: it never dies, and its memory stays bounded.
    @Test func randomClientMessagesNeitherCrashTheServerNorGrowItsMemory() async throws {
        let server = try await ServerProcess(server: ["maxSegmentBytes": "\(1 << 20)"])
        let before = server.peakRSSKiB
        let sessions = Mutex(0)
        await propertyCheck(count: 60, input: Gen.int(in: 0...9).array(of: 1...16), Gen.int().array(of: 64)) { kinds, numbers in
            // A server that closes the connection half way is within its rights: a failed send ends that case.
            try? await Self.offPool {
                let client = try RawClient(port: server.port, receiveTimeoutMs: 2000)
                let kindsFirst = kinds.first ?? 0
                // Mostly upgraded sessions; now and then the raw bytes go to the HTTP parser instead.
                if kindsFirst != 9 {
                    guard try client.upgrade(token: "good-token").status == 101 else { return }
                    sessions.withLock { $0 += 1 }
                }
                for (index, kind) in kinds.enumerated() {
                    let n = numbers[(index * 2) % numbers.count], m = numbers[(index * 2 + 1) % numbers.count]
                    let small = Int(truncatingIfNeeded: UInt(bitPattern: n) % 300_000)
                    switch kind {
                    case 0: try client.sendText(Self.hello)
                    case 1:
                        try client.sendText(
                            #"{"type":"hello","protocol":\#(m % 3),"device":"x","locale":"en","agent":"f","video":{"codec":"hevc","container":"mp4","width":\#(n),"height":1,"fps":1,"segmentMs":\#(m)}}"#
                        )
                    case 2:
                        try client.sendText(
                            Self.header(seq: n, durationMs: m, bytes: small, chunks: (small + 65_535) / 65_536, sha: Self.sha([])))
                    case 3: try client.sendText(Self.header(seq: m, durationMs: 5000, bytes: n, chunks: m, sha: Self.sha([])))
                    case 4: try client.sendFrame(.binary, [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: min(small, 70_000)))
                    case 5: try client.sendText(#"{"type":"segment","seq":1e400,"durationMs":\#(n)0000000000,"bytes":-0.5,"chunks":null}"#)
                    case 6:
                        try client.sendFrame(
                            RawClient.Opcode(rawValue: UInt8(truncatingIfNeeded: n) & 0x0f) ?? .ping,
                            Array(repeating: 1, count: min(small, 125)))
                    case 7: try client.send(withUnsafeBytes(of: n) { Array($0) } + withUnsafeBytes(of: m) { Array($0) })
                    case 8: try client.sendText(String(decoding: withUnsafeBytes(of: n) { Array($0) }, as: UTF8.self))
                    default: try client.send("GET /metrics HTTP/1.1\r\nContent-Length: \(n)\r\n\r\n")
                    }
                }
            }
        }
        print(
            "random client messages: \(sessions.withLock { $0 }) upgraded sessions of 60; server peak RSS \(before / 1024) → \(server.peakRSSKiB / 1024) MiB"
        )
        try await Self.stillServes(server)
        // Sessions come and go one at a time and hold at most 1 MiB of segment each.
        #expect((server.peakRSSKiB - before) / 1024 < 64, "peak RSS grew from \(before / 1024) to \(server.peakRSSKiB / 1024) MiB")
    }
}
