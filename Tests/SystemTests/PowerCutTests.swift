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
        let lines = URL(fileURLWithPath: folder.path + ".out")
        defer { try? FileManager.default.removeItem(at: lines) }
        var interruptedWrites = 0
        for run in 0..<20 {
            _ = FileManager.default.createFile(atPath: lines.path, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: RecordCommandTests.agent)
            process.arguments = ["record", "--config", config, "--out", folder.path, "--fast"]
            process.environment = ProcessInfo.processInfo.environment.merging([
                "DASHCAM_SPEECH_SINK": "wav:\(folder.path)/speech", "DASHCAM_STATUS_SOCKET": "\(folder.path)/status.sock"
            ]) { $1 }
            process.standardOutput = try FileHandle(forWritingTo: lines)
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Even runs: a kill anywhere from start-up on. Odd runs: once segments flow (a busy
            // machine can take seconds to start), where a segment closes every few hundred ms.
            if !run.isMultiple(of: 2) {
                let deadline = ContinuousClock.now + .seconds(60)
                while (try? Data(contentsOf: lines))?.isEmpty != false, ContinuousClock.now < deadline, process.isRunning {
                    try await Task.sleep(for: .milliseconds(10))
                }
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: run.isMultiple(of: 2) ? 500...2500 : 0...1500)))
            kill(process.processIdentifier, SIGKILL)
            while process.isRunning { try await Task.sleep(for: .milliseconds(10)) }
            let names = files(under: folder)
            if names.contains(where: { $0.hasSuffix(".partial") }) { interruptedWrites += 1 }
        }
        let segments = files(under: folder).filter { $0.hasSuffix(".mp4") }
        #expect(!segments.isEmpty, "no segment survived to check")
        for name in segments {
            let probed = try FFprobe.probe(folder.appendingPathComponent(name))
            #expect(probed.codec == "hevc" && probed.frames == 50 && probed.moovBeforeMdat, "\(name): \(probed)")
        }

        // A write the power cut tore (rarely caught by a kill above): half a segment, hidden.
        let day = try #require(segments.first?.split(separator: "/").first)
        try Data(repeating: 0, count: 4096).write(to: folder.appendingPathComponent("\(day)/.000099-20261123T000000.000Z.mp4.partial"))
        // Each start removes what the kill before it left, so only the last kills' remain.
        let hidden = files(under: folder).filter { $0.split(separator: "/").last?.hasPrefix(".") == true && $0.hasSuffix(".partial") }
        let again = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "DASHCAM_SPEECH_SINK=wav:\(folder.path)/speech", "DASHCAM_STATUS_SOCKET=\(folder.path)/status.sock",
                RecordCommandTests.agent, "record", "--config", config, "--out", folder.path, "--fast", "--segments", "1"
            ])
        #expect(again.status == 0, "\(again.stderr)")
        // (The log of the order segments were recorded in is the one hidden file that stays.)
        let left = files(under: folder).filter { $0.split(separator: "/").last?.hasPrefix(".") == true && $0 != ".recording-order" }
        #expect(left.isEmpty, "temporary files after a clean start: \(left)")
        // Every segment on the disk is named in that log, wherever a kill caught it: it is logged
        // before its file is written, so none ends up "older than every logged one" and first to go.
        let logged = Set(
            try String(contentsOf: folder.appendingPathComponent(".recording-order"), encoding: .utf8)
                .split(separator: "\n").map(String.init))
        let unlogged = files(under: folder).filter { $0.hasSuffix(".mp4") }.filter {
            !logged.contains(String($0.split(separator: "/").last ?? ""))
        }
        #expect(unlogged.isEmpty, "segments the recording order does not name: \(unlogged)")
        #expect(again.stderr.contains("removed \(hidden.count) temporary file(s) an interrupted run left"), "\(hidden) \(again.stderr)")
        print("power cuts: 20 kills, \(segments.count) whole segments, \(interruptedWrites) kills caught a write in progress")
    }
}
