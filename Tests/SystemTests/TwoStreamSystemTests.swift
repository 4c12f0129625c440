import Foundation
import Testing
import TestSupport

/// The built agent with two streams against the built server: evidence (libx264, the camera's
/// size and rate) in the recording folder, the small HEVC copy on the wire, and the server's
/// guidance spoken. What a user would check: the card holds H.264 at full size, the server got
/// the small segments (their bytes, not the evidence's), and every pair names its partner.
@Suite(.serialized) struct TwoStreamSystemTests {
    @Test func theCardKeepsFullSizeEvidenceAndTheServerGetsTheSmallCopy() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let (server, port) = try await files.startServer()
        defer { _ = server.stop() }
        // Nothing is dropped for its age: on a busy machine a segment may take long to go out, and
        // what is checked is that each copy arrives whole, not how fast.
        let config = try files.agentConfig(
            url: "ws://127.0.0.1:\(port)/v1/stream", segmentSeconds: 1,
            uplink: ["video": "{width: 160, height: 96, fps: 5}", "queueSegments": "100", "queueMaxAgeMs": "600000"],
            extra: "guidance:\n  maxAgeMs: 600000\n")
        // The test pattern at 640x360@10 as the camera, libx264 as the evidence's encoder.
        var yaml = try String(contentsOfFile: config, encoding: .utf8)
        yaml = yaml.replacingOccurrences(of: "  width: 320\n  height: 180\n  fps: 10\n", with: "  width: 640\n  height: 360\n  fps: 10\n")
            .replacingOccurrences(of: "  preference: [libx265]\n", with: "  preference: [hevc_vaapi, libx264]\n")
        try files.write("agent.yaml", yaml)
        let agent = try Spawned("dashcam-agent", ["record", "--config", config], folder: files.folder)
        let verified = { (server: Spawned) in server.stderr.components(separatedBy: "verified").count - 1 }
        try #require(
            await agent.wait(for: .seconds(300)) { _ in verified(server) >= 3 },
            "\(agent.stderr.suffix(3000))\n\(server.stderr.suffix(2000))")
        #expect(agent.stop() == 0)

        let lines = agent.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let evidence = lines.filter { $0["stream"] as? String == "evidence" }
        let copies = lines.filter { $0["stream"] as? String == "guidance" }
        #expect(evidence.count >= 3 && copies.count == evidence.count, "\(agent.stdout)")
        let bySeq = Dictionary(copies.map { ($0["seq"] as! Int, $0) }) { a, _ in a }
        for line in evidence {
            let seq = try #require(line["seq"] as? Int)
            let copy = try #require(bySeq[seq], "segment \(seq) has a guidance copy")
            #expect(line["capturedAt"] as? String == copy["capturedAt"] as? String)
            #expect(line["captureStartMonotonicNs"] as? Int == copy["captureStartMonotonicNs"] as? Int)
            #expect((line["partner"] as? [String: Any])?["sha256"] as? String == copy["sha256"] as? String)
            #expect((copy["partner"] as? [String: Any])?["sha256"] as? String == line["sha256"] as? String)
            #expect(copy["file"] == nil, "the copy is not written to the card")
            #expect((line["codec"] as? String, line["encoder"] as? String, line["width"] as? Int) == ("h264", "libx264", 640))
            #expect((copy["codec"] as? String, copy["encoder"] as? String, copy["width"] as? Int) == ("hevc", "libx265", 160))
            // Full segments: each stream's second, every slot a frame or a frame counted as dropped
            // (a busy machine's camera loses some), and the file holds the frames its line says.
            if line["endReason"] as? String == "complete" {
                let frames = (line["frames"] as? Int ?? 0, line["droppedFrames"] as? Int ?? 0)
                let copied = (copy["frames"] as? Int ?? 0, copy["droppedFrames"] as? Int ?? 0)
                #expect(frames.0 + frames.1 == 10 && copied.0 + copied.1 == 5 && frames.0 > 0 && copied.0 > 0, "\(line) \(copy)")
                let probed = try FFprobe.probe(
                    files.folder.appendingPathComponent("segments").appendingPathComponent(try #require(line["file"] as? String)))
                #expect((probed.codec, probed.tag, probed.frames, probed.keyframeCount) == ("h264", "avc1", frames.0, 1))
                #expect(probed.startsWithIDR && probed.moovBeforeMdat)
            }
        }
        // The server verified the copies, byte for byte (its log line carries their size).
        for copy in copies.prefix(3) {
            let seq = copy["seq"] as! Int, bytes = copy["bytes"] as! Int
            #expect(
                server.stderr.contains("segment \(seq) verified") && server.stderr.contains("bytes=\(bytes)")
                    || server.stderr.contains("\"bytes\":\"\(bytes)\""),
                "segment \(seq) of \(bytes) bytes: \(server.stderr.suffix(1500))")
        }
        // Only evidence on the card: one MP4 per evidence line.
        let mp4s =
            FileManager.default.enumerator(atPath: files.path("segments"))?.compactMap { $0 as? String }.filter { $0.hasSuffix(".mp4") }
            ?? []
        #expect(mp4s.count == evidence.count, "\(mp4s)")
        // The passed-over hardware encoder is one line with its reason, not FFmpeg's errors.
        #expect(agent.stderr.contains("passed over hevc_vaapi (no VAAPI device"), "\(agent.stderr.prefix(3000))")
        #expect(!agent.stderr.contains("hardware frames reference"))
        // The server's guidance ("slow down" in its script) was spoken.
        let spoken = (try? FileManager.default.contentsOfDirectory(atPath: files.path("speech"))) ?? []
        #expect(!spoken.isEmpty, "\(agent.stderr.suffix(2000))")
    }
}
