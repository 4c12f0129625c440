@testable import Agent
import Foundation
import HAL
import Testing
import TestSupport

/// Parking mode end to end with the built agent and server: the ignition goes off, the car parks
/// (continuous recording and the session stop), a still view records nothing, motion records a
/// protected clip that starts `parking.preRollSeconds` before it, and ignition on resumes driving
/// and says how many clips were saved.
///
/// The ignition here is a GPIO `value` file (`parking.ignition.line` may name one); the GPIO
/// character device with a real edge is proven in the VM suite's gpio-sim cases. The camera is
/// a file made by ffmpeg: 8 s of a still grey view, 6 s of ffmpeg's moving test picture, then still
/// grey again.
@Suite(.serialized) struct ParkingSystemTests {
    struct SegmentLine: Decodable {
        var seq: Int
        var file: String?
        var parking: SegmentParkingEvent?
    }
    @Test func aParkedCarKeepsAClipOfMotionWithItsPreRollAndTellsItWhenDriving() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let video = files.path("still-then-moving.mp4")
        let made = try await Command.executeAsync(
            "/usr/bin/ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "color=c=gray:s=320x180:r=10:d=8", "-f", "lavfi", "-i", "testsrc2=s=320x180:r=10:d=6",
                "-f", "lavfi", "-i", "color=c=gray:s=320x180:r=10:d=60", "-filter_complex", "[0][1][2]concat=n=3:v=1:a=0", "-c:v",
                "libx264", "-preset", "ultrafast", "-y", video
            ])
        try #require(made.status == 0, "\(made.stderr)")
        let (server, port) = try await files.startServer()
        defer { _ = server.stop() }
        try files.write("ignition", "1\n")
        try files.write(
            "agent.yaml",
            """
            camera:
              source: file
              file: \(video)
              width: 320
              height: 180
              fps: 10
              pace: realtime
            encoder:
              preference: [libx265]
              segmentSeconds: 2
            recording:
              dir: \(files.path("segments"))
            uplink:
              url: ws://127.0.0.1:\(port)/v1/stream
              allowInsecure: true
              tokenFile: \(files.path("token"))
              deviceId: loop-car
            device:
              locale: en-US
            speech:
              sink: wav:\(files.path("speech"))
            status:
              socket: \(files.path("status.sock"))
            offline:
              enabled: false
            parking:
              ignition:
                line: \(files.path("ignition"))
                debounceMs: 300
              delaySeconds: 1
              fps: 5
              sensitivity: medium
              preRollSeconds: 3
              afterSeconds: 2
            """)
        let agent = try Spawned("dashcam-agent", ["record", "--config", files.path("agent.yaml")], folder: files.folder)
        defer { _ = agent.stop() }
        let socket = files.path("status.sock")
        @Sendable func status() throws -> AgentStatus {
            let reply = try Command.execute(RecordCommandTests.agent, ["status", "--json", "--socket", socket])
            return try JSONDecoder().decode(AgentStatus.self, from: Data(reply.stdout.utf8))
        }
        #expect(
            await agent.wait(for: .seconds(60)) { $0.stderr.contains("uplink: connected") || $0.stdout.split(separator: "\n").count >= 2 },
            "\(agent.stderr)")

        // Ignition off: parked after the debounce and the delay.
        try files.write("ignition", "0\n")
        #expect(
            await agent.wait(for: .seconds(60)) { $0.stderr.contains("parked: continuous recording and streaming stopped") },
            "\(agent.stderr)")
        let parked = try status()
        #expect(parked.parking?.mode == "parked" && parked.parking?.ignition == "off", "\(String(describing: parked.parking))")
        #expect(await agent.wait(for: .seconds(30)) { _ in (try? status().uplink.state) == "parked" })
        let lines = { (spawned: Spawned) in spawned.wholeLines.filter { !$0.isEmpty } }
        // Parked, the driving segments are all closed; the last one's line may still be on its way.
        let lastSeq = try #require(try status().recording?.lastSeq)
        #expect(await agent.wait(for: .seconds(30)) { lines($0).contains { $0.contains("\"seq\":\(lastSeq),") } }, "\(agent.stdout)")
        // The last driving line: on a busy machine the clip below may already follow it.
        let lastDriving = try #require(lines(agent).last { !$0.contains("\"parking\":{") })
        // The segment in progress ends "parked"; when parking came just as one had ended, there is
        // none in progress, and the last is a whole one.
        let endedWhole = lastDriving.contains("\"endReason\":\"complete\"") && lastDriving.contains("\"complete\":true")
        #expect(lastDriving.contains("\"endReason\":\"parked\"") || endedWhole, "\(lastDriving)")
        if endedWhole { print("parking came just as segment \(lastSeq) ended: no segment was in progress") }

        // Motion in the view, 8 s after parking: one clip, protected, with 3 s before the motion.
        #expect(
            await agent.wait(for: .seconds(120)) { lines($0).contains { $0.contains("\"parking\":{") } }, "\(agent.stderr.suffix(3000))")
        let clipLine = try #require(lines(agent).first { $0.contains("\"parking\":{") })
        let clip = try JSONDecoder().decode(SegmentLine.self, from: Data(clipLine.utf8))
        #expect(clip.parking?.trigger == "motion", "\(clipLine)")
        // The pre-roll: up to 3 s held in memory (5 fps; a late frame on a busy machine may leave
        // a gap at its start), where a clip without one would start at the trigger.
        let offset = try #require(clip.parking?.triggerOffsetMs)
        #expect(offset >= 2000 && offset <= 3200, "\(clipLine)")
        #expect(clip.file?.hasPrefix("protected/") == true, "\(clipLine)")
        let probed = try FFprobe.probe(URL(fileURLWithPath: files.path("segments")).appendingPathComponent(clip.file ?? ""))
        #expect(probed.codec == "hevc" && probed.startsWithIDR, "\(probed)")
        // From the pre-roll through the motion (6 s of the file) to 2 s after it.
        #expect(probed.duration >= 8, "\(probed)")
        // Nothing of the still view before it was saved: the clip is the first line since parking.
        #expect(lines(agent).drop { $0 != lastDriving }.dropFirst().first == clipLine)

        // Ignition on: driving again, the count said, the session back.
        try files.write("ignition", "1\n")
        #expect(
            await agent.wait(for: .seconds(60)) { $0.stderr.contains("status: One parking event saved.") }, "\(agent.stderr.suffix(3000))")
        #expect(await agent.wait(for: .seconds(60)) { _ in (try? status().uplink.state) == "connected" }, "\(agent.stderr.suffix(4000))")
        let driving = try status()
        #expect(driving.parking?.mode == "driving" && driving.parking?.eventsTotal == 1, "\(String(describing: driving.parking))")
        #expect(
            await agent.wait(for: .seconds(60)) { spawned in
                lines(spawned).last.map { $0.contains("\"endReason\":\"complete\"") && !$0.contains("\"parking\"") } ?? false
            })
        #expect(agent.stop() == 0, "\(agent.stderr.suffix(2000))")
    }
}
