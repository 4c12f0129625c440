import Foundation
import TestSupport
import Testing

/// deploy/dashcam-agent.service, checked by systemd's own analyzer.
@Suite struct ServiceUnitTests {
    static let unit = RecordCommandTests.repo.appendingPathComponent("deploy/dashcam-agent.service")

    /// The unit with ExecStart pointing at the binary just built (verify checks that it exists).
    func unitForThisBuild() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let text = try String(contentsOf: Self.unit, encoding: .utf8)
        #expect(text.contains("ExecStart=/usr/bin/dashcam-agent record"))
        let copy = folder.appendingPathComponent("dashcam-agent.service")
        try text.replacingOccurrences(of: "/usr/bin/dashcam-agent", with: RecordCommandTests.agent).write(
            to: copy, atomically: true, encoding: .utf8)
        return copy
    }

    @Test func theUnitVerifiesClean() async throws {
        let copy = try unitForThisBuild()
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let result = try await Command.executeAsync("systemd-analyze", ["verify", copy.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "verify printed: \(result.stderr)")
    }

    @Test func theExposureIsAtMostTwo() async throws {
        let copy = try unitForThisBuild()
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let result = try await Command.executeAsync("systemd-analyze", ["security", "--offline=true", "--no-pager", copy.path])
        let line = try #require(
            result.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(result.stdout)\(result.stderr)")
        let figure = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(figure <= 2.0, "\(line)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        print("systemd-analyze security: \(line)")
    }

    @Test func theUnitWaitsForReadinessAndIsWatched() throws {
        let text = try String(contentsOf: Self.unit, encoding: .utf8)
        for line in [
            "Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "DevicePolicy=closed", "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"
        ] {
            #expect(text.split(separator: "\n").contains { $0.hasPrefix(line) }, "missing \(line)")
        }
    }
}
