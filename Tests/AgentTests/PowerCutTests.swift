import Foundation
import Glibc
import TestSupport
import Testing

/// Power cuts, simulated with SIGKILL at random moments while the agent records: what is left
/// in the folder are whole segments, and the next start removes the temporary files.
@Suite struct PowerCutTests {
    @Test func twentyKillsLeaveOnlyWholeSegmentsAndTheNextStartCleansUp() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("powercut-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let config = RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path
        var interruptedWrites = 0
        for _ in 0..<20 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: RecordCommandTests.agent)
            process.arguments = ["record", "--config", config, "--out", folder.path, "--fast"]
            process.environment = ProcessInfo.processInfo.environment.merging([
                "DASHCAM_SPEECH_SINK": "wav:\(folder.path)/speech", "DASHCAM_STATUS_SOCKET": "\(folder.path)/status.sock",
            ]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // At full speed a segment closes every few hundred milliseconds: kills land anywhere.
            try await Task.sleep(for: .milliseconds(Int.random(in: 500...2500)))
            kill(process.processIdentifier, SIGKILL)
            while process.isRunning { try await Task.sleep(for: .milliseconds(10)) }
            let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            if names.contains(where: { $0.hasSuffix(".partial") }) { interruptedWrites += 1 }
        }
        let segments = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".mp4") }.sorted()
        #expect(!segments.isEmpty, "no segment survived to check")
        for name in segments {
            let probed = try FFprobe.probe(folder.appendingPathComponent(name))
            #expect(probed.codec == "hevc" && probed.frames == 50 && probed.moovBeforeMdat, "\(name): \(probed)")
        }

        // A write the power cut tore (rarely caught by a kill above): half a segment, hidden.
        try Data(repeating: 0, count: 4096).write(to: folder.appendingPathComponent(".000099-20261123T000000.000Z.mp4.partial"))
        let again = try await Command.executeAsync("/usr/bin/env", [
            "DASHCAM_SPEECH_SINK=wav:\(folder.path)/speech", "DASHCAM_STATUS_SOCKET=\(folder.path)/status.sock",
            RecordCommandTests.agent, "record", "--config", config, "--out", folder.path, "--fast", "--segments", "1",
        ])
        #expect(again.status == 0, "\(again.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix(".") }
        #expect(left.isEmpty, "temporary files after a clean start: \(left)")
        #expect(again.stderr.contains("removed \(interruptedWrites + 1) temporary file(s) an interrupted run left"), "\(again.stderr)")
        print("power cuts: 20 kills, \(segments.count) whole segments, \(interruptedWrites) kills caught a write in progress")
    }
}
