@testable import Agent
import Foundation
import Glibc
import GuidanceProtocol
import Testing
import TestSupport

/// The G-sensor end to end, with the built agent and server: a shock saves an incident, the car
/// says so, `status` lists it, its segments are protected on the car and kept by the server, and
/// its clip reaches the owner's clip store through a link that dies in the middle of the upload.
///
/// The accelerometer here is a folder laid out as an IIO device's sysfs folder is (`name`,
/// `in_accel_*_raw`, per-axis scales, `sampling_frequency` and its list, as Debian's `st_accel`
/// driver shows a LIS3DH), which `sensors.accel.device` may name. The real driver is proven in the
/// VM suite (Tests/HIL, case 60), where the same agent reads a LIS3DH made by `i2c-stub`.
@Suite(.serialized) struct IncidentSystemTests {
    /// An IIO accelerometer's files, raw counts of 1 mg (LIS3DH at ±2 g: 0.009806 m/s² a count).
    struct FakeIIO {
        let folder: URL
        init(in parent: URL) throws {
            folder = parent.appendingPathComponent("iio:device0")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (name, text) in [
                ("name", "lis3dh\n"), ("sampling_frequency", "1\n"), ("sampling_frequency_available", "1 10 25 50 100 200 400 1600\n")
            ]
                + ["x", "y", "z"].map({ ("in_accel_\($0)_scale", "0.009806\n") })
            {
                try Data(text.utf8).write(to: folder.appendingPathComponent(name))
            }
            try set(x: 0, y: 0, z: 1000)
        }

        /// Written in place, at a fixed width: the agent keeps the files open and reads from 0.
        func set(x: Int, y: Int, z: Int) throws {
            for (axis, value) in [("x", x), ("y", y), ("z", z)] {
                let text = String(repeating: " ", count: max(0, 7 - String(value).count)) + String(value) + "\n"
                let fd = open(folder.appendingPathComponent("in_accel_\(axis)_raw").path, O_WRONLY | O_CREAT, 0o644)
                guard fd >= 0 else { throw POSIXError(.EIO) }
                defer { close(fd) }
                _ = text.withCString { pwrite(fd, $0, 8, 0) }
            }
        }
    }

    @Test func aShockSavesAnIncidentTheCarSaysTheServerKeepsAndItsClipSurvivesACutLink() async throws {
        let keep = FileManager.default.temporaryDirectory.appendingPathComponent("keep-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: keep, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: keep) }
        // The server finds the road clear every time: no guidance is spoken over the phrase.
        try Data("- clear: true\n".utf8).write(to: keep.appendingPathComponent("clear.yaml"))
        let clipStore = keep.appendingPathComponent("clips")
        let server = try await ServerProcess(
            server: ["keepDir": keep.path],
            analyzer: ["kind": "scripted", "scriptFile": keep.appendingPathComponent("clear.yaml").path],
            extra: "clips:\n  dir: \(clipStore.path)")
        defer { server.stop() }
        // The road between car and server. The answer to the clip's first part (the server's
        // second `clip_have`: the first answers the announce) never arrives: the link dies there,
        // both ways at once, and the next attempt finds it still down (an upgrade that never
        // comes); the one after that goes through.
        let link = try await FlakyLink(targetPort: server.port, cutWhenServerSends: ("\"clip_have\"", 2)) { index in
            index == 1 ? .neverAnswer : .forward
        }
        let files = try LoopFiles()
        defer { files.remove() }
        try files.write("token", "good-token\n", mode: 0o600)
        let sensor = try FakeIIO(in: files.folder)
        // The uplink holds every segment until it is delivered (a busy machine makes them late;
        // by default late ones are left to the disk): this test is about what the server keeps.
        let config = try files.agentConfig(
            url: "ws://127.0.0.1:\(link.port)/v1/stream", segmentSeconds: 1,
            uplink: ["queueSegments": "100", "queueMaxAgeMs": "600000", "connectTimeoutMs": "2000"],
            extra: """
                sensors:
                  accel:
                    device: \(sensor.folder.path)
                    hz: 50
                incident:
                  sensitivity: medium
                  beforeSeconds: 3
                  afterSeconds: 3
                """)
        let agent = try Spawned("dashcam-agent", ["record", "--config", config], folder: files.folder)
        defer { _ = agent.stop() }
        #expect(
            await agent.wait(for: .seconds(60)) { $0.stderr.contains("g-sensor: reading lis3dh (iio:device0) at 50 Hz") }, "\(agent.stderr)"
        )
        // The chip was set to its fastest rate.
        #expect(try String(contentsOf: sensor.folder.appendingPathComponent("sampling_frequency"), encoding: .utf8).hasPrefix("1600"))
        let segments = { (spawned: Spawned) in spawned.stdout.split(separator: "\n").count }
        #expect(await agent.wait(for: .seconds(60)) { segments($0) >= 5 }, "\(agent.stderr)")

        // A collision: 2 g from the side (over medium's 1 g across) until the agent has felt it,
        // then still again. Held until the event, not for a time: on a busy machine the reading
        // thread may be late, and a sleep may be longer than asked.
        let shock = Date()
        try sensor.set(x: 0, y: 2000, z: 1000)
        #expect(await agent.wait(for: .seconds(60)) { $0.stderr.contains("g-sensor: incident:") }, "\(agent.stderr.suffix(3000))")
        try sensor.set(x: 0, y: 0, z: 1000)
        let shockEnd = Date()
        // As long as the agent waits for the window's last segment on a busy machine (IncidentService.finishWait), and more.
        #expect(await agent.wait(for: .seconds(180)) { $0.stderr.contains("g-sensor: incident saved") }, "\(agent.stderr.suffix(3000))")

        // Listed in `status`, saved, with its files.
        let reply = try await Command.executeAsync(RecordCommandTests.agent, ["status", "--json", "--socket", files.path("status.sock")])
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(reply.stdout.utf8))
        let incident = try #require(status.incidents?.list.first, "\(reply.stdout)")
        #expect(status.incidents?.list.count == 1 && status.incidents?.state == "watching", "\(reply.stdout)")
        #expect(incident.state == "saved" && incident.impacts == 1 && incident.peakG >= 1.5 && incident.peakG < 2.5, "\(incident)")
        let at = try #require(ISO8601DateFormatter.milliseconds.date(from: incident.at))
        let from = try #require(ISO8601DateFormatter.milliseconds.date(from: incident.from))
        let to = try #require(ISO8601DateFormatter.milliseconds.date(from: incident.to))
        // The impact is a reading taken while the sensor held the shock (0.1 s for the clocks'
        // conversion); the window runs 3 s before it, and 3 s past the last impact, which is at
        // most one 60-ms mean after the shock ended.
        #expect(
            at.timeIntervalSince(shock) > -0.1 && at.timeIntervalSince(shockEnd) < 0.1,
            "the impact is the shock: \(incident.at) against \(shock)–\(shockEnd)")
        #expect(
            abs(from.timeIntervalSince(at) + 3) < 0.01 && to.timeIntervalSince(at) >= 3 && to.timeIntervalSince(shockEnd) < 3.2,
            "\(incident), the shock ended \(shockEnd)")

        // Every segment of the window is protected, and each is a whole HEVC segment (ffprobe).
        let recordings = URL(fileURLWithPath: files.path("segments"))
        let overlapping = StoredSegment.all(in: recordings).filter { $0.capturedAt < to && $0.capturedAt.addingTimeInterval(1) > from }
        // Six or seven 1-s segments; fewer only where a busy machine's camera gave no frame for a
        // whole second (a second missing from the recording, not from the incident): every
        // segment recorded in the window is one of them.
        let recordedInWindow = agent.stdout.split(separator: "\n").compactMap { line -> Int? in
            guard let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let seq = json["seq"] as? Int, let stamp = json["capturedAt"] as? String,
                let at = ISO8601DateFormatter.milliseconds.date(from: stamp)
            else { return nil }
            return at < to && at.addingTimeInterval(1) > from ? seq : nil
        }
        #expect(
            !overlapping.isEmpty && Set(overlapping.map(\.seq)) == Set(recordedInWindow),
            "\(overlapping.map(\.path)) against \(recordedInWindow)")
        #expect(!agent.stderr.contains("dropped: the disk and the uplink"), "no segment was dropped between the encoder and the disk")
        if overlapping.count < 6 { print("incident window: \(overlapping.count) segments; the camera gave no frame for the other seconds") }
        #expect(overlapping.allSatisfy { $0.isProtected }, "\(overlapping.map(\.path))")
        #expect(Set(incident.files) == Set(overlapping.map(\.path)), "\(incident.files)")
        for segment in overlapping {
            let probed = try FFprobe.probe(recordings.appendingPathComponent(segment.path))
            #expect(probed.codec == "hevc", "\(segment.path): \(probed)")
        }
        // ... and still listed after a restart, from protected/incidents.json.
        let saved = IncidentService.load(from: recordings)
        #expect(saved.first?.id == incident.id && saved.first?.files == incident.files)

        // The car said it: the log, and a WAV as long as eSpeak-ng's program makes of the phrase.
        #expect(agent.stderr.contains("status: Incident saved."), "\(agent.stderr.suffix(2000))")
        let expected = try await LocalGuidanceSystemTests.reference("Incident saved.", voice: "en-us")
        #expect(
            await agent.wait(for: .seconds(30)) { _ in
                let spoken = (try? FileManager.default.contentsOfDirectory(atPath: files.path("speech"))) ?? []
                return spoken.contains { name in
                    let count = (try? LocalGuidanceSystemTests.samples(files.path("speech/\(name)")).count) ?? 0
                    return abs(count - expected) * 200 <= expected
                }
            },
            "a WAV of \(expected) voiced samples in \(((try? FileManager.default.contentsOfDirectory(atPath: files.path("speech"))) ?? []).sorted().map { "\($0): \((try? LocalGuidanceSystemTests.samples(files.path("speech/\($0)")).count) ?? -1)" }); \(agent.stderr.split(separator: "\n").filter { $0.contains("status:") || $0.contains("speech") || $0.contains("uplink") }.suffix(30).joined(separator: "\n"))"
        )

        // The server kept the incident's segments in keepDir/incidents/, whatever its analysis said.
        let kept = keep.appendingPathComponent("incidents")
        #expect(
            await server.process.wait(for: .seconds(240)) { _ in
                let folders = (try? FileManager.default.contentsOfDirectory(atPath: kept.path)) ?? []
                guard folders.count == 1, let folder = folders.first else { return false }
                let inside = (try? FileManager.default.contentsOfDirectory(atPath: kept.appendingPathComponent(folder).path)) ?? []
                return inside.filter { $0.hasSuffix(".mp4") }.count == overlapping.count
            },
            "kept \(((try? FileManager.default.subpathsOfDirectory(atPath: kept.path)) ?? []).sorted()) of \(overlapping.map(\.seq)); agent: \(agent.stderr.split(separator: "\n").filter { $0.contains("uplink") || $0.contains("incident") }.suffix(20).joined(separator: "\n")); server: \(server.process.stderr.split(separator: "\n").filter { !$0.contains("verified") }.suffix(20).joined(separator: "\n"))"
        )
        let folder = try #require(try FileManager.default.contentsOfDirectory(atPath: kept.path).first)
        #expect(folder.hasSuffix("-" + incident.id) && folder.hasPrefix("car-1-"), "\(folder)")
        let record = try JSONSerialization.jsonObject(
            with: Data(contentsOf: kept.appendingPathComponent(folder).appendingPathComponent("incident.json")))
        let message = try #require((record as? [String: Any])?["incident"] as? [String: Any])
        #expect(message["final"] as? Bool == true && message["id"] as? String == incident.id, "\(message)")
        #expect(Set((message["seqs"] as? [Int]) ?? []) == Set(overlapping.map(\.seq)), "\(message)")
        for mp4 in try FileManager.default.contentsOfDirectory(atPath: kept.appendingPathComponent(folder).path) where mp4.hasSuffix(".mp4")
        {
            let probed = try FFprobe.probe(kept.appendingPathComponent(folder).appendingPathComponent(mp4))
            #expect(probed.codec == "hevc", "\(mp4): \(probed)")
        }

        // The clip: cut mid-upload, it went on from what the server held on a later session and
        // arrived once, every file whole and equal to the car's.
        let clipID = "incident-" + incident.id
        let logged = { (spawned: Spawned) in spawned.stderr.contains("uplink: clip \(clipID) is stored on the server") }
        #expect(
            await agent.wait(for: .seconds(240), until: logged),
            "\(agent.stderr.split(separator: "\n").filter { $0.contains("clip") || $0.contains("session") }.suffix(30).joined(separator: "\n")); server: \(server.process.stderr.split(separator: "\n").filter { $0.contains("clip") }.suffix(20).joined(separator: "\n"))"
        )
        #expect(link.tripped && link.connections >= 3, "the link died mid-upload (\(link.connections) connections)")
        #expect(agent.stderr.components(separatedBy: "uplink: clip \(clipID) is stored on the server").count == 2, "stored once")
        // ... and the session after the cut went on from what the server held, not from the start.
        let resumed = agent.stderr.split(separator: "\n").first { $0.contains("uplink: clip \(clipID): the server holds ") }
        let heldBefore = resumed.flatMap { Int($0.components(separatedBy: "the server holds ").last?.split(separator: " ").first ?? "") }
        #expect((heldBefore ?? 0) > 0, "\(resumed.map(String.init) ?? "no resume logged")")
        let clipFolders = try FileManager.default.subpathsOfDirectory(atPath: clipStore.path).filter { $0.hasSuffix("/" + clipID) }
        #expect(clipFolders.count == 1, "\(clipFolders)")
        let clipFolder = clipStore.appendingPathComponent(try #require(clipFolders.first))
        let held = try FileManager.default.contentsOfDirectory(atPath: clipFolder.path).sorted()
        let carFiles = incident.files.map { ($0 as NSString).lastPathComponent }.sorted()
        #expect(held == (carFiles + ["clip.json"]).sorted(), "no part left over, nothing twice: \(held)")
        for path in incident.files {
            let name = (path as NSString).lastPathComponent
            let car = try Data(contentsOf: recordings.appendingPathComponent(path))
            let stored = try Data(contentsOf: clipFolder.appendingPathComponent(name))
            #expect(sha256Hex(stored) == sha256Hex(car), "\(name)")
        }
        let clipRecord =
            try JSONSerialization.jsonObject(with: Data(contentsOf: clipFolder.appendingPathComponent("clip.json"))) as? [String: Any]
        let described = try #require(clipRecord?["clip"] as? [String: Any], "\(String(describing: clipRecord))")
        #expect(described["kind"] as? String == "incident" && described["at"] as? String == incident.at, "\(described)")
        #expect((described["peakG"] as? Double).map { abs($0 - incident.peakG) < 0.01 } == true, "\(described)")
        // The car keeps nothing in custody once the server has it, and says so in `status`.
        let uploads = try FileManager.default.contentsOfDirectory(atPath: recordings.appendingPathComponent(ClipCustody.folder).path)
        #expect(uploads.filter { $0.hasSuffix(".json") }.isEmpty, "\(uploads)")
        let after = try await Command.executeAsync(RecordCommandTests.agent, ["status", "--json", "--socket", files.path("status.sock")])
        let uploadStatus = try JSONDecoder().decode(AgentStatus.self, from: Data(after.stdout.utf8)).uploads
        #expect(uploadStatus?.stored == 1 && uploadStatus?.waiting.isEmpty == true, "\(after.stdout)")
        #expect(agent.stop() == 0, "\(agent.stderr.suffix(2000))")
        await link.stop()
    }

    @Test func aMissingSensorIsRetriedAndRecordingGoesOn() async throws {
        let files = try LoopFiles()
        defer { files.remove() }
        let agent = try files.startRecorder(
            extra: """
                sensors:
                  accel:
                    device: lis3dh-not-here
                """)
        defer { _ = agent.stop() }
        #expect(await agent.wait(for: .seconds(60)) { $0.stdout.split(separator: "\n").count >= 3 }, "\(agent.stderr)")
        #expect(agent.stderr.contains("g-sensor: sensors.accel.device lis3dh-not-here: no IIO device of that name"), "\(agent.stderr)")
        let reply = try await Command.executeAsync(RecordCommandTests.agent, ["status", "--json", "--socket", files.path("status.sock")])
        let status = try JSONDecoder().decode(AgentStatus.self, from: Data(reply.stdout.utf8))
        #expect(status.incidents?.state == "failing" && status.incidents?.problem?.contains("lis3dh-not-here") == true, "\(reply.stdout)")
        #expect(agent.stop() == 0)
    }
}

extension ISO8601DateFormatter {
    static var milliseconds: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
