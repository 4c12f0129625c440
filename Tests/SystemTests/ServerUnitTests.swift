import Foundation
import TestSupport
import Testing

/// deploy/server/guidance-server.service, checked by systemd's own analyzer.
@Suite struct ServerUnitTests {
    @Test func theServerUnitVerifiesCleanWithExposureAtMostTwo() async throws {
        let unit = RecordCommandTests.repo.appendingPathComponent("deploy/server/guidance-server.service")
        let text = try String(contentsOf: unit, encoding: .utf8)
        #expect(text.contains("ExecStart=/usr/local/bin/guidance-server serve --config /etc/guidance-server/server.yaml"))
        #expect(text.contains("RestartPreventExitStatus=78") && text.contains("User=guidance-server"))
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let copy = folder.appendingPathComponent("guidance-server.service")
        let built = Spawned.buildFolder.appendingPathComponent("guidance-server").path
        try text.replacingOccurrences(of: "/usr/local/bin/guidance-server", with: built).write(to: copy, atomically: true, encoding: .utf8)
        let verify = try await Command.executeAsync("systemd-analyze", ["verify", copy.path])
        #expect(verify.status == 0 && verify.stderr.isEmpty, "\(verify.stderr)")
        let security = try await Command.executeAsync("systemd-analyze", ["security", "--offline=true", "--no-pager", copy.path])
        let line = try #require(
            security.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(security.stdout)")
        let figure = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(figure <= 2.0, "\(line)")
    }
}
