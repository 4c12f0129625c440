import Agent
import Foundation
import TestSupport
import Testing

@Suite struct ProbeCommandTests {
    @Test func probeReportsWhichEncodersOpenAndWhy() async throws {
        let result = try Command.execute(RecordCommandTests.agent, ["probe", "--json", "--device", "/dev/null"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let encoders = try #require(report["encoders"] as? [[String: Any]])
        #expect(encoders.map { $0["name"] as? String } == AgentConfig().encoder.preference)
        #expect(encoders.first { $0["name"] as? String == "libx264" }?["opens"] as? Bool == true, "an H.264 encoder opens for evidence")
        #expect(encoders.last?["opens"] as? Bool == true)
        #expect(encoders.first?["opens"] as? Bool == false)
        #expect((encoders.first?["reason"] as? String)?.isEmpty == false)
        let notCameras = try #require(report["notCameras"] as? [String: String])
        #expect(notCameras["/dev/null"]?.contains("not a video capture device") == true)
        // FFmpeg's complaints (an encoder with no device here) come through the agent's log,
        // naming the codec, never raw ("[hevc_v4l2m2m @ 0x…] …") on standard error.
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.allSatisfy(Self.isLogLine), "\(result.stderr)")
        #expect(!result.stderr.contains(" @ 0x"), "\(result.stderr)")
    }

    /// Whether `line` is as swift-log's stream handler writes it: time, level, label, message.
    static func isLogLine(_ line: Substring) -> Bool {
        line.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4} (trace|debug|info|notice|warning|error|critical) [a-z-]+:.*/)
            != nil
    }
}
