@testable import Agent
import ConfigSupport
import Foundation
@testable import HAL
import Testing

/// `setup --board`'s rules, without files or cameras: whose each key is, and which size, rate and
/// pixel format a camera's list gives.
struct BoardSetupTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A config file's text as `setup` would read it.
    func file(_ yaml: String) async throws -> BoardSetup.File {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("setup-\(UUID().uuidString).yaml")
        try yaml.write(to: url, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: url) }
        return BoardSetup.File(
            config: try await AgentConfig.load(file: url.path, environment: [:]), keys: try AgentConfig.keys(setIn: url.path))
    }

    func shippedFile(_ relative: String) async throws -> BoardSetup.File {
        let path = Self.repo.appendingPathComponent(relative).path
        return BoardSetup.File(config: try await AgentConfig.load(file: path, environment: [:]), keys: try AgentConfig.keys(setIn: path))
    }

    func setup(board: String = "raspberry-pi-4", current: String?, previous: [String: String] = [:]) async throws -> BoardSetup {
        var currentFile: BoardSetup.File?
        if let current { currentFile = try await file(current) }
        return BoardSetup(
            board: board, profile: try await shippedFile("device-config/boards/\(board).yaml"),
            shipped: try await shippedFile("device-config/default.yaml"), current: currentFile, previous: previous)
    }

    func source(_ outcome: BoardSetup.Outcome, _ name: String) -> BoardSetup.Source? {
        outcome.written.first { $0.key.name == name }?.source
    }

    // MARK: - Whose keys

    @Test func theShippedFileTakesTheBoardAndKeepsWhatTheUserChanged() async throws {
        var current = try String(contentsOf: Self.repo.appendingPathComponent("device-config/default.yaml"), encoding: .utf8)
        // The user's own: a server, a language, a rate, a smaller cap.
        current += "uplink:\n  url: wss://guidance.example.com/v1/stream\n  deviceId: van-7\n"
        current = current.replacingOccurrences(of: "# device:\n#   locale: ko-KR", with: "device:\n  locale: de-DE")
        current = current.replacingOccurrences(of: "  fps: 10", with: "  fps: 15")
        let setup = try await setup(current: current)
        #expect(setup.yours == ["uplink.url", "uplink.deviceId", "device.locale", "camera.fps"])

        let outcome = setup.merge()
        let config = outcome.config
        #expect(config.uplink.url == "wss://guidance.example.com/v1/stream")
        #expect(config.device.locale == "de-DE")
        #expect(config.camera.fps == 15, "the user's rate, not the board's 30")
        #expect(config.camera.device == "/dev/dashcam-camera", "the board's, over the package's /dev/video0")
        #expect(config.encoder.preference == ["h264_v4l2m2m", "libx264"])
        #expect(config.guidanceFormat == VideoFormat(width: 640, height: 360, fps: 10), "two streams: the board's guidance copy")
        #expect(config.haptics.chip == "gpiochip0" && config.haptics.line == "17")
        #expect(config.recording.dir == "/var/lib/dashcam-agent/recordings", "the package's, kept")
        #expect(source(outcome, "camera.fps") == .yours)
        #expect(source(outcome, "haptics.line") == .board)
        #expect(source(outcome, "recording.minFreeMegabytes") == .package)
        #expect(outcome.overridden == ["camera.fps: kept yours, 15; the board gives 30"])
    }

    @Test func aSecondSetupReplacesWhatTheFirstChoseButNotWhatTheUserChangedSince() async throws {
        let first = try await setup(board: "rockchip-rk3588", current: nil)
        var written = first.render(first.merge(), version: "test")
        #expect(BoardSetup.previousChoices(in: written)["encoder.rateControl"] == "bitrate")
        #expect(BoardSetup.previousChoices(in: written)["haptics.chip"] == "gpiochip1")
        // The user moves the motor to another pin after the first setup.
        written = written.replacingOccurrences(of: "  line: \"9\"", with: "  line: \"22\"")
        #expect(written.contains("line: \"22\""))

        let second = try await setup(board: "raspberry-pi-4", current: written, previous: BoardSetup.previousChoices(in: written))
        #expect(second.yours == ["haptics.line"])
        let outcome = second.merge()
        #expect(outcome.config.haptics.line == "22", "the user's pin")
        #expect(outcome.config.haptics.chip == "gpiochip0", "the Pi's chip replaces the RK3588's")
        #expect(outcome.config.encoder.rateControl == .crf, "the RK3588's bitrate control goes back to the package's crf")
        #expect(outcome.config.encoder.bitrateKbps == AgentConfig().encoder.bitrateKbps)
        #expect(!outcome.written.contains { $0.key.name == "encoder.bitrateKbps" }, "a key only the first board set is not written")
        #expect(outcome.config.camera.width == 1920 && outcome.config.camera.fps == 30)
        #expect(outcome.overridden == ["haptics.line: kept yours, \"22\"; the board gives \"17\""])
    }

    @Test func theWrittenFileReadsBackAsTheMergedConfig() async throws {
        var current = try String(contentsOf: Self.repo.appendingPathComponent("device-config/default.yaml"), encoding: .utf8)
        current += "uplink:\n  url: wss://guidance.example.com/v1/stream\n  tokenFile: /etc/dashcam-agent/token\n  deviceId: \"007\"\n"
        let setup = try await setup(board: "nvidia-jetson", current: current)
        let camera = BoardSetup.CameraChoice(
            device: "/dev/v4l/by-id/usb-Cam_123-video-index0", width: 1280, height: 720, fps: 30, pixelFormat: .mjpeg)
        let outcome = setup.merge(camera: camera)
        let text = setup.render(outcome, version: "1.2.3")
        let reread = try await file(text)
        #expect(reread.config == outcome.config, "\(text)")
        #expect(reread.config.uplink.deviceId == "007", "a string that looks like a number stays a string")
        #expect(reread.config.haptics.line == "PQ.05")
        #expect(reread.config.camera.device == "/dev/v4l/by-id/usb-Cam_123-video-index0")
        #expect(text.hasPrefix("# The agent's config, written by `dashcam-agent setup --board nvidia-jetson` (1.2.3)."))
        let choices = BoardSetup.previousChoices(in: text)
        #expect(choices["camera.device"] == "/dev/v4l/by-id/usb-Cam_123-video-index0")
        #expect(choices["camera.pixelFormat"] == "mjpeg")
        #expect(choices["encoder.preference"] == "[hevc_nvenc, h264_nvenc, h264_v4l2m2m, libx264]")
        #expect(choices["uplink.url"] == nil, "the user's keys are not setup's choices")
    }

    // MARK: - The encoders tried here

    func trial(_ name: String, opened: Bool, sustains: Bool? = nil, reason: String? = nil) -> EncoderBench.Trial {
        EncoderBench.Trial(
            stream: "evidence", encoder: name, format: "1920x1080@30", opened: opened, reason: reason,
            fps: opened ? (sustains == true ? 45 : 12) : nil, cpuCores: opened ? 1 : nil, sustains: opened ? sustains : nil)
    }

    @Test func theEncodersThatKeepUpAreKeptInOrderWithTheSoftwareFallbackLast() {
        let pi4 = ["h264_v4l2m2m", "libx264"]
        let hardware = BoardSetup.chooseEncoders(
            pi4, trials: [trial("h264_v4l2m2m", opened: true, sustains: true), trial("libx264", opened: true, sustains: false)])
        #expect(hardware.kept == ["h264_v4l2m2m", "libx264"], "libx264 stays behind the hardware, as the fallback")
        #expect(hardware.notes == ["libx264: 12 frames/s at 1920x1080@30, too slow for it"])

        let noCodec = BoardSetup.chooseEncoders(
            pi4,
            trials: [
                trial("h264_v4l2m2m", opened: false, reason: "no V4L2 memory-to-memory H.264 encoder"),
                trial("libx264", opened: true, sustains: true)
            ])
        #expect(noCodec.kept == ["libx264"])
        #expect(noCodec.notes == ["h264_v4l2m2m: does not open here (no V4L2 memory-to-memory H.264 encoder), left out"])

        let tooSlow = BoardSetup.chooseEncoders(
            pi4, trials: [trial("h264_v4l2m2m", opened: false, reason: "x"), trial("libx264", opened: true, sustains: false)])
        #expect(tooSlow.kept == nil, "the profile's list stays")
        #expect(tooSlow.notes.last?.hasPrefix("no encoder keeps up at this size and rate") == true)
        #expect(BoardSetup.chooseEncoders(pi4, trials: []).kept == nil)
    }

    @Test func measuredEncodersAreASetupChoiceButYoursAreKept() async throws {
        let setup = try await setup(current: nil)
        let outcome = setup.merge(encoders: ["libx264"])
        #expect(outcome.config.encoder.preference == ["libx264"])
        #expect(outcome.written.first { $0.key.name == "encoder.preference" }?.source == .measured)
        #expect(BoardSetup.previousChoices(in: setup.render(outcome, version: "t"))["encoder.preference"] == "[libx264]")

        var current = try String(contentsOf: Self.repo.appendingPathComponent("device-config/default.yaml"), encoding: .utf8)
        current = current.replacingOccurrences(
            of: "  preference: [hevc_v4l2m2m, h264_v4l2m2m, hevc_vaapi, h264_vaapi, hevc_nvenc, h264_nvenc, libx264, libx265]",
            with: "  preference: [libx265]")
        let mine = try await self.setup(current: current)
        #expect(mine.yours.contains("encoder.preference"))
        #expect(mine.merge(encoders: ["libx264"]).config.encoder.preference == ["libx265"])
    }

    // MARK: - The camera

    func camera(_ formats: [(String, Bool, [(Int, Int, [Double])])]) -> V4L2DeviceInfo {
        V4L2DeviceInfo(
            path: "/dev/video0", card: "Test camera", driver: "uvcvideo", bus: "usb-1",
            formats: formats.map { format in
                V4L2DeviceInfo.Format(
                    fourcc: format.0, description: format.0, emulated: format.1,
                    sizes: format.2.map { V4L2DeviceInfo.Size(width: $0.0, height: $0.1, fps: $0.2) })
            })
    }

    func wanted(_ width: Int, _ height: Int, _ fps: Int, _ pixelFormat: AgentConfig.CapturePixelFormat = .auto) -> AgentConfig.Camera {
        var camera = AgentConfig().camera
        camera.width = width
        camera.height = height
        camera.fps = fps
        camera.pixelFormat = pixelFormat
        return camera
    }

    /// A UVC webcam as USB 2.0 has them: YUYV slow at large sizes, MJPEG fast; libv4l2's YU12 emulated.
    var webcam: V4L2DeviceInfo {
        camera([
            ("YUYV", false, [(640, 480, [30, 15]), (640, 360, [30, 15, 10, 5]), (1280, 720, [10, 5])]),
            ("MJPG", false, [(640, 480, [30]), (640, 360, [30, 15]), (1280, 720, [30, 15]), (1920, 1080, [30])]),
            ("YU12", true, [(640, 480, [30]), (640, 360, [30]), (1280, 720, [30, 15])])
        ])
    }

    @Test func anOfferedSizeAndRateAreKeptAndAutoStaysAuto() {
        let choice = BoardSetup.chooseFormat(for: wanted(640, 360, 10), on: webcam, device: "/dev/v4l/by-id/cam")
        #expect(choice == BoardSetup.CameraChoice(device: "/dev/v4l/by-id/cam", width: 640, height: 360, fps: 10, pixelFormat: .auto))
    }

    @Test func aRateOnlyMJPEGGivesAtThatSizeSetsMJPEG() {
        let choice = BoardSetup.chooseFormat(for: wanted(1280, 720, 30), on: webcam, device: "/dev/video0")
        #expect(choice.width == 1280 && choice.height == 720 && choice.fps == 30)
        #expect(choice.pixelFormat == .mjpeg, "auto would take YUYV, which has 10 fps at most at 1280x720")
        #expect(choice.notes == [])
    }

    @Test func aMissingSizeTakesTheNearestOfTheSameShapeAndAMissingRateTheNearestBelow() {
        let choice = BoardSetup.chooseFormat(for: wanted(960, 540, 12), on: webcam, device: "/dev/video0")
        #expect(choice.width == 640 && choice.height == 360, "16:9 and nearest in pixels (1280x720 is further)")
        #expect(choice.fps == 10, "the highest rate below 12 at 640x360")
        #expect(choice.pixelFormat == .auto)
        #expect(
            choice.notes == [
                "the camera has no 960x540: 640x360, the nearest it offers",
                "the camera has no 12 fps at 640x360: 10, the nearest it offers"
            ])
    }

    @Test func aPixelFormatTheCameraLacksBecomesAuto() {
        let yuyvOnly = camera([("YUYV", false, [(640, 360, [30, 10])])])
        let choice = BoardSetup.chooseFormat(for: wanted(640, 360, 10, .mjpeg), on: yuyvOnly, device: "/dev/video0")
        #expect(choice.pixelFormat == .auto)
        #expect(choice.notes == ["the camera has no mjpeg format: camera.pixelFormat auto"])
        let kept = BoardSetup.chooseFormat(for: wanted(1280, 720, 30, .mjpeg), on: webcam, device: "/dev/video0")
        #expect(kept.pixelFormat == .mjpeg && kept.fps == 30)
    }

    @Test func aRateAboveAllTakesTheLowestAndASteplessCameraTakesTheWantedSize() {
        let fast = camera([("YUYV", false, [(640, 360, [60, 30])])])
        #expect(BoardSetup.chooseFormat(for: wanted(640, 360, 10), on: fast, device: "/dev/video0").fps == 30)
        var stepwise = camera([("NV12", false, [(2592, 1944, [30, 1])])])
        stepwise.formats[0].range = V4L2DeviceInfo.SizeRange(minWidth: 32, maxWidth: 2592, minHeight: 32, maxHeight: 1944)
        let choice = BoardSetup.chooseFormat(for: wanted(640, 360, 10), on: stepwise, device: "/dev/video0")
        #expect(choice.width == 640 && choice.height == 360 && choice.fps == 10 && choice.pixelFormat == .auto)
        #expect(choice.notes == [])
        let none = camera([("H264", false, [(1920, 1080, [30])])])
        #expect(
            BoardSetup.chooseFormat(for: wanted(640, 360, 10), on: none, device: "/dev/video0").notes
                == ["the camera offers none of YUYV, NV12, YU12 or MJPEG: size and rate as the board asks"])
    }
}
