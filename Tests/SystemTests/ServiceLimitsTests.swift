import Agent
import Foundation
import TestSupport
import Testing

/// deploy/dashcam-agent.service: what is restarted, the resource bounds, and the drop-in that
/// moves recording.dir, each checked by systemd's own analyzer.
@Suite struct ServiceLimitsTests {
    static let dropIn = RecordCommandTests.repo.appendingPathComponent("deploy/recording-dir.conf")

    func lines(_ url: URL) throws -> [String] {
        try String(contentsOf: url, encoding: .utf8).split(separator: "\n").map(String.init)
    }

    @Test func aConfigErrorIsNotRestartedAndAMissingCameraIs() throws {
        let unit = try lines(ServiceUnitTests.unit)
        #expect(unit.filter { $0.hasPrefix("RestartPreventExitStatus=") } == ["RestartPreventExitStatus=\(ExitStatus.config)"])
        #expect(unit.contains("Restart=on-failure") && unit.contains("StartLimitIntervalSec=0"))
    }

    @Test func theAgentIsBounded() throws {
        let unit = try lines(ServiceUnitTests.unit)
        for key in ["LimitNOFILE=", "MemoryMax=", "TasksMax="] {
            #expect(unit.filter { $0.hasPrefix(key) }.count == 1, "one \(key)")
        }
        // The control socket's cap keeps its clients far below the file limit.
        let files = try #require(unit.first { $0.hasPrefix("LimitNOFILE=") }.flatMap { Int($0.dropFirst("LimitNOFILE=".count)) })
        #expect(StatusSocket.Limits().connections * 4 < files)
    }

    @Test func theRecordingDirDropInVerifiesAndKeepsTheExposure() async throws {
        let copy = try ServiceUnitTests().unitForThisBuild()
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let folder = copy.deletingLastPathComponent().appendingPathComponent("dashcam-agent.service.d")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: Self.dropIn, to: folder.appendingPathComponent("recording-dir.conf"))

        let verified = try await Command.executeAsync("systemd-analyze", ["verify", copy.path])
        #expect(verified.status == 0 && verified.stderr.isEmpty, "\(verified.stderr)")
        let security = try await Command.executeAsync("systemd-analyze", ["security", "--offline=true", "--no-pager", copy.path])
        let line = try #require(
            security.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(security.stdout)\(security.stderr)")
        let figure = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(figure <= 2.0, "\(line)")

        // The folder it opens is the one it waits for, and the deploy README says how to install it.
        let dropIn = try lines(Self.dropIn)
        let writable = try #require(dropIn.first { $0.hasPrefix("ReadWritePaths=") }).dropFirst("ReadWritePaths=".count)
        #expect(dropIn.contains("RequiresMountsFor=\(writable)"))
        let readme = try String(contentsOf: RecordCommandTests.repo.appendingPathComponent("deploy/README.md"), encoding: .utf8)
        #expect(readme.contains("/etc/systemd/system/dashcam-agent.service.d/recording-dir.conf") && readme.contains("ReadWritePaths="))
    }
}
