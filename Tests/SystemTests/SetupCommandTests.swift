import Agent
import ConfigSupport
import Foundation
import TestSupport
import Testing

/// `dashcam-agent setup --board NAME` run as a user runs it, on files in a folder of its own. The
/// camera half (a real camera's sizes and rates, its stable name) runs in VM case 50-doctor, on vivid.
@Suite(.serialized) struct SetupCommandTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let agent = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("dashcam-agent").path
    static let profiles = repo.appendingPathComponent("device-config").path

    let folder: URL
    var config: String { folder.appendingPathComponent("agent.yaml").path }

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("setup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    func setup(_ arguments: [String]) async throws -> Command.Result {
        try await Command.executeAsync(Self.agent, ["setup", "--profiles", Self.profiles, "--config", config] + arguments)
    }

    func load(_ path: String) async throws -> AgentConfig {
        try await AgentConfig.load(file: path, environment: [:])
    }

    @Test func theInstalledFileTakesTheBoardKeepsTheUsersKeysAndASecondBoardReplacesTheFirst() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        // The conffile as the package installs it, then edited by the user: a server and a rate.
        var installed = try String(contentsOfFile: Self.profiles + "/default.yaml", encoding: .utf8)
        installed = installed.replacingOccurrences(of: "  fps: 10", with: "  fps: 15")
        installed += "uplink:\n  url: wss://guidance.example.com/v1/stream\n  tokenFile: /etc/dashcam-agent/token\n"
        try installed.write(toFile: config, atomically: true, encoding: .utf8)

        let first = try await setup(["--board", "raspberry-pi-4", "--no-camera", "--no-encoder-check"])
        #expect(first.status == 0, "\(first.stderr)")
        var written = try await load(config)
        #expect(written.camera.device == "/dev/dashcam-camera")
        #expect(written.camera.fps == 15, "the user's rate")
        #expect(written.encoder.preference == ["h264_v4l2m2m", "libx264"], "the profile's, untried")
        #expect(written.haptics.chip == "gpiochip0" && written.haptics.line == "17")
        #expect(written.uplink.url == "wss://guidance.example.com/v1/stream")
        #expect(written.recording.dir == "/var/lib/dashcam-agent/recordings")
        #expect(first.stdout.contains("camera.fps: kept yours, 15; the board gives 30"), "\(first.stdout)")
        #expect(!first.stdout.contains("encoders tried"))
        #expect(try String(contentsOfFile: config + ".before-setup", encoding: .utf8) == installed, "the previous file is kept")

        // Another board: the Pi 4's choices go, the user's stay. Its encoders are tried here: the
        // MPP ones are not in this FFmpeg, so they are left out, and libx264 stays if it keeps up
        // with 1080p at the user's 15 fps on this machine (else the profile's list, said so).
        let second = try await setup(["--board", "rockchip-rk3588", "--no-camera"])
        #expect(second.status == 0, "\(second.stderr)")
        written = try await load(config)
        #expect(written.haptics.chip == "gpiochip1" && written.haptics.line == "9")
        #expect(second.stdout.contains("encoders tried at 1920x1080@15:"), "\(second.stdout)")
        #expect(second.stdout.contains("hevc_rkmpp: does not open here (not in this FFmpeg build), left out"), "\(second.stdout)")
        if second.stdout.contains("no encoder keeps up") {
            #expect(written.encoder.preference == ["hevc_rkmpp", "h264_rkmpp", "libx264"])
        } else {
            #expect(written.encoder.preference == ["libx264"], "\(second.stdout)")
            #expect(second.stdout.contains("encoder.preference") && second.stdout.contains("(measured)"), "\(second.stdout)")
        }
        #expect(written.encoder.rateControl == .bitrate)
        #expect(written.camera.width == 1920 && written.camera.fps == 15)
        #expect(written.uplink.url == "wss://guidance.example.com/v1/stream")
        let mode = try FileManager.default.attributesOfItem(atPath: config)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o644)
    }

    @Test func dryRunPrintsTheFileAndWritesNothing() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        let run = try await setup(["--board", "usb-webcam", "--no-camera", "--dry-run", "--no-encoder-check"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: config))
        #expect(run.stdout.contains("pixelFormat: mjpeg") && run.stdout.contains("width: 1920"), "\(run.stdout)")
        // What it printed is a config the agent takes.
        let printed = folder.appendingPathComponent("printed.yaml").path
        try run.stdout.write(toFile: printed, atomically: true, encoding: .utf8)
        #expect(try await load(printed).camera.pixelFormat == .mjpeg)
    }

    @Test func anUnknownBoardAndABrokenFileAreRefusedAndNothingIsWritten() async throws {
        defer { try? FileManager.default.removeItem(at: folder) }
        let unknown = try await setup(["--board", "raspberry-pi-9"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("no board profile 'raspberry-pi-9'"), "\(unknown.stderr)")
        #expect(
            unknown.stderr.contains("raspberry-pi-4, raspberry-pi-4-usb-webcam, raspberry-pi-5"),
            "the boards there are listed: \(unknown.stderr)")
        #expect(!FileManager.default.fileExists(atPath: config))

        let broken = "camera:\n  fsp: 15\n"
        try broken.write(toFile: config, atomically: true, encoding: .utf8)
        let refused = try await setup(["--board", "raspberry-pi-4", "--no-camera"])
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("camera.fsp") && refused.stderr.contains("camera.fps"), "\(refused.stderr)")
        #expect(try String(contentsOfFile: config, encoding: .utf8) == broken, "the user's file is untouched")

        try FileManager.default.removeItem(atPath: config)
        let noCamera = try await setup(["--board", "raspberry-pi-4", "--camera", folder.appendingPathComponent("video9").path])
        #expect(noCamera.status == 66, "\(noCamera.stderr)")
    }
}
