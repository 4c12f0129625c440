import Agent
import ConfigSupport
import Foundation
import HAL
import Logging
import Synchronization
import TestSupport
import Testing

/// The repository's device-config/, found from this file so the tests run from any directory.
private let deviceConfig = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("device-config")

private func load(
    _ name: String, environment: [String: String] = [:], overrides: [String: String] = [:]
) async throws -> AgentConfig {
    try await AgentConfig.load(
        file: deviceConfig.appendingPathComponent(name).path, environment: environment, overrides: overrides)
}

/// Loads `yaml` (if any) from a temporary file and returns the message of the ConfigError that
/// `load` throws, with that file's path written as FILE. Any other error fails the test.
private func failure(
    yaml: String? = nil, environment: [String: String] = [:], overrides: [String: String] = [:]
) async throws -> String {
    try await withYAML(yaml) { path in
        do {
            _ = try await AgentConfig.load(file: path, environment: environment, overrides: overrides)
        } catch let error as ConfigError {
            return path.map { error.description.replacingOccurrences(of: $0, with: "FILE") } ?? error.description
        }
        Issue.record("load succeeded but should have failed")
        return ""
    }
}

private func withYAML<T>(_ yaml: String?, _ body: (String?) async throws -> T) async throws -> T {
    guard let yaml else {
        return try await body(nil)
    }
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("agent-config-\(UUID()).yaml").path
    try yaml.write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

// MARK: - Loading

@Test func builtInDefaults() async throws {
    let config = try await AgentConfig.load(file: nil, environment: [:])
    #expect(config == AgentConfig())

    let camera = config.camera
    #expect(camera.source == .v4l2 && camera.device == "/dev/video0" && camera.file == nil)
    #expect(camera.width == 640 && camera.height == 360 && camera.fps == 10)
    #expect(camera.pixelFormat == .auto && camera.buffers == 4 && camera.pace == .realtime)
    #expect(camera.pollTimeoutMs == 1000 && camera.stallTimeouts == 3 && camera.reopenBackoffMs == 250...2000)
    let encoder = config.encoder
    #expect(
        encoder.preference == ["hevc_v4l2m2m", "h264_v4l2m2m", "hevc_vaapi", "h264_vaapi", "hevc_nvenc", "h264_nvenc", "libx264", "libx265"]
    )
    #expect(config.uplink.video == AgentConfig.UplinkVideo() && config.guidanceFormat == nil, "one stream")
    #expect(encoder.rateControl == .crf && encoder.crf == 28 && encoder.segmentSeconds == 5)
    #expect(encoder.bitrateKbps == 1000 && encoder.effectiveMaxrateKbps == 1000 && encoder.effectiveBufsizeKbps == 2000)
    #expect(config.recording.dir == "/var/lib/dashcam-agent/recordings")
    #expect(
        config.recording.maxMegabytes == nil && config.recording.protectedMaxMegabytes == 2048 && config.recording.minFreeMegabytes == 256)
    #expect("\(config.log.level)" == "info")
}

@Test func demoYAML() async throws {
    var expected = AgentConfig()
    expected.camera.source = .testPattern
    expected.encoder.preference = ["libx265"]
    expected.recording.dir = "out/demo-segments"
    #expect(try await load("demo.yaml") == expected)
}

@Test func defaultYAML() async throws {
    // The installed config spells out the built-in recording settings.
    let expected = AgentConfig()
    #expect(try await load("default.yaml") == expected)
}

@Test func everyKeyIsReadFromYAMLIntoItsOwnField() async throws {
    let yaml = """
        camera:
          source: file
          device: /dev/video2
          file: clip.mp4
          width: 1280
          height: 720
          fps: 30
          pixelFormat: mjpeg
          buffers: 8
          pollTimeoutMs: 2000
          stallTimeouts: 5
          reopenBackoffMs: [100, 9000]
          pace: fast
        encoder:
          preference: [libx265, hevc_vaapi]
          rateControl: bitrate
          crf: 20
          bitrateKbps: 2500
          maxrateKbps: 3000
          bufsizeKbps: 6000
          segmentSeconds: 10
        recording:
          dir: /tmp/segs
          maxMegabytes: 900
          protectedMaxMegabytes: 300
          minFreeMegabytes: 50
        log:
          level: debug
        """
    let config = try await withYAML(yaml) { try await AgentConfig.load(file: $0, environment: [:]) }
    var expected = AgentConfig()
    expected.camera.source = .file
    expected.camera.device = "/dev/video2"
    expected.camera.file = "clip.mp4"
    expected.camera.width = 1280
    expected.camera.height = 720
    expected.camera.fps = 30
    expected.camera.pixelFormat = .mjpeg
    expected.camera.buffers = 8
    expected.camera.pollTimeoutMs = 2000
    expected.camera.stallTimeouts = 5
    expected.camera.reopenBackoffMs = 100...9000
    expected.camera.pace = .fast
    expected.encoder.preference = ["libx265", "hevc_vaapi"]
    expected.encoder.rateControl = .bitrate
    expected.encoder.crf = 20
    expected.encoder.bitrateKbps = 2500
    expected.encoder.maxrateKbps = 3000
    expected.encoder.bufsizeKbps = 6000
    expected.encoder.segmentSeconds = 10
    expected.recording = .init()
    expected.recording.dir = "/tmp/segs"
    expected.recording.maxMegabytes = 900
    expected.recording.protectedMaxMegabytes = 300
    expected.recording.minFreeMegabytes = 50
    expected.log = config.log
    #expect(config == expected)
    #expect("\(config.log.level)" == "debug")
}

@Test func emptyFileSetsNothing() async throws {
    let config = try await withYAML("# nothing here yet\n") { try await AgentConfig.load(file: $0, environment: [:]) }
    #expect(config == AgentConfig())
}

@Test func commandLineBeatsEnvironmentBeatsFileBeatsDefault() async throws {
    try await withYAML("camera:\n  fps: 12\n") { path in
        let environment = ["DASHCAM_CAMERA_FPS": "15"]
        #expect(try await AgentConfig.load(file: nil, environment: [:]).camera.fps == 10)
        #expect(try await AgentConfig.load(file: path, environment: [:]).camera.fps == 12)
        #expect(try await AgentConfig.load(file: path, environment: environment).camera.fps == 15)
        let all = try await AgentConfig.load(file: path, environment: environment, overrides: ["camera.fps": "20"])
        #expect(all.camera.fps == 20)
    }
}

@Test func environmentVariablesSplitCamelCaseAndCommaSeparateLists() async throws {
    let config = try await AgentConfig.load(
        file: nil,
        environment: [
            "DASHCAM_CAMERA_POLL_TIMEOUT_MS": "2000",
            "DASHCAM_CAMERA_REOPEN_BACKOFF_MS": "100, 200",
            "DASHCAM_ENCODER_PREFERENCE": "hevc_vaapi,libx265",
            "DASHCAM_CAMERA_SOURCE": "test-pattern",
            "CAMERA_FPS": "99"  // no prefix, so not ours
        ])
    var expected = AgentConfig()
    expected.camera.pollTimeoutMs = 2000
    expected.camera.reopenBackoffMs = 100...200
    expected.encoder.preference = ["hevc_vaapi", "libx265"]
    expected.camera.source = .testPattern
    #expect(config == expected)
    let pollTimeout = AgentConfig.keys.first { $0.name == "camera.pollTimeoutMs" }
    #expect(pollTimeout?.environmentVariable == "DASHCAM_CAMERA_POLL_TIMEOUT_MS")
}

@Test func commandLineValuesAreTypedLikeEnvironmentVariables() async throws {
    let config = try await AgentConfig.load(
        file: nil, environment: [:],
        overrides: ["camera.reopenBackoffMs": "1,2", "encoder.preference": "libx265", "camera.fps": "30"])
    var expected = AgentConfig()
    expected.camera.reopenBackoffMs = 1...2
    expected.encoder.preference = ["libx265"]
    expected.camera.fps = 30
    #expect(config == expected)
}

// MARK: - Errors

@Test func unknownKeySuggestsTheClosestKnownKey() async throws {
    #expect(
        try await failure(yaml: "camera:\n  fps: 10\n  fsp: 10\n")
            == "FILE:3: unknown key 'camera.fsp' (did you mean 'camera.fps'?)")
    #expect(
        try await failure(yaml: "encoder:\n  fps: 10\n")
            == "FILE:2: unknown key 'encoder.fps' (did you mean 'camera.fps'?)")
    #expect(try await failure(yaml: "camra:\n  fps: 10\n") == "FILE:1: unknown key 'camra' (did you mean 'camera'?)")
    #expect(
        try await failure(overrides: ["camera.pollTimeoutMS": "10"])
            == "command line: unknown key 'camera.pollTimeoutMS' (did you mean 'camera.pollTimeoutMs'?)")
}

@Test func unknownKeyWithoutNearMatchListsItsSection() async throws {
    let message = try await failure(yaml: "camera:\n  zoom: 2\n")
    #expect(message.hasPrefix("FILE:2: unknown key 'camera.zoom' (valid keys here: camera.source, camera.device, "))
    #expect(message.hasSuffix("camera.pace)"))
    #expect(!message.contains("encoder."))
    #expect(
        try await failure(yaml: "network:\n  port: 1\n")
            == "FILE:1: unknown key 'network' (valid keys here: device, camera, encoder, recording, uplink, guidance, offline, speech, haptics, sensors, incident, parking, upload, status, log)"
    )
}

/// Keys three deep (`sensors.accel.device`): the group is a mapping of its own, with the same checks.
@Test func keysInAGroupOfASection() async throws {
    let config = try await withYAML("sensors:\n  accel:\n    device: lis3dh\n    hz: 50\n") { try await AgentConfig.load(file: $0) }
    #expect(config.sensors.accel.device == "lis3dh" && config.sensors.accel.hz == 50)
    #expect(
        try await failure(yaml: "sensors:\n  accel: lis3dh\n")
            == "FILE:2: 'sensors.accel' must be a mapping of keys such as sensors.accel.device, sensors.accel.hz")
    #expect(
        try await failure(yaml: "sensors:\n  accel:\n    rate: 50\n")
            == "FILE:3: unknown key 'sensors.accel.rate' (valid keys here: sensors.accel.device, sensors.accel.hz)")
    #expect(
        try await failure(yaml: "sensors:\n  accel:\n    hz: 0\n")
            == "sensors.accel.hz: '0' is not allowed; expected an integer 1...400 (given at FILE:3)")
    #expect(
        try await failure(yaml: "incident:\n  sensitivity: extreme\n")
            == "incident.sensitivity: 'extreme' is not allowed; expected one of high, medium, low, off (given at FILE:2)")
}

@Test func sectionMustBeAMapping() async throws {
    let message = try await failure(yaml: "camera: 5\n")
    #expect(message.hasPrefix("FILE:1: 'camera' must be a mapping of keys such as camera.source, camera.device, "))
    #expect(
        try await failure(yaml: "- camera\n")
            == "FILE:1: the top level must be a mapping of keys such as device, camera, encoder, recording, uplink, guidance, offline, speech, haptics, sensors, incident, parking, upload, status, log"
    )
}

@Test(arguments: [
    // Wrong type.
    ("camera:\n  fps: ten\n", "camera.fps: 'ten' is not allowed; expected an integer 1...120 (given at FILE:2)"),
    ("camera:\n  fps: [10]\n", "camera.fps: '[10]' is not allowed; expected an integer 1...120 (given at FILE:2)"),
    (
        "encoder:\n  preference: libx265\n",
        "encoder.preference: 'libx265' is not allowed; expected a non-empty list of non-empty strings (given at FILE:2)"
    ),
    (
        "camera:\n  fps:\n    max: 10\n",
        "camera.fps: 'a mapping' is not allowed; expected an integer 1...120 (given at FILE:2)"
    ),
    // Out of range.
    ("camera:\n  fps: 500\n", "camera.fps: '500' is not allowed; expected an integer 1...120 (given at FILE:2)"),
    (
        "camera:\n  width: 641\n",
        "camera.width: '641' is not allowed; expected an even integer 16...4096 (given at FILE:2)"
    ),
    (
        "camera:\n  reopenBackoffMs: [5000, 250]\n",
        "camera.reopenBackoffMs: '[5000, 250]' is not allowed; expected two integers [min, max] with min ≤ max, each 1...600000 (given at FILE:2)"
    ),
    ("camera:\n  file: ~\n", "camera.file: '~' is not allowed; expected a non-empty path (given at FILE:2)"),
    ("recording:\n  dir: ''\n", "recording.dir: '' is not allowed; expected a non-empty path (given at FILE:2)"),
    // Not one of the choices.
    (
        "camera:\n  source: usb\n",
        "camera.source: 'usb' is not allowed; expected one of v4l2, test-pattern, file (given at FILE:2)"
    ),
    // The payload mode that could not work, gone: the error names the one that does.
    (
        "uplink:\n  payload: base64\n",
        "uplink.payload: 'base64' is not allowed; expected one of chunks (given at FILE:2)"
    ),
    (
        "parking:\n  ignition:\n    line: '-3'\n",
        "parking.ignition.line: '-3' is not allowed; expected a line offset, 0 or more, a line name such as `ignition`, or the path of a GPIO value file"
    ),
    (
        "parking:\n  ignition:\n    chip: gpiochip0\n",
        "parking.ignition.line: not set, but parking.ignition.chip is 'gpiochip0'; set the ignition's line on it (an offset or a name)"
    ),
    (
        "parking:\n  fps: 0\n",
        "parking.fps: '0' is not allowed; expected an integer 1...30 (given at FILE:2)"
    ),
    (
        "camera:\n  fps: 10\nuplink:\n  video:\n    fps: 15\n",
        "uplink.video.fps: '15' is not allowed; expected at most camera.fps (10): the guidance stream takes a share of the camera's frames"
    ),
    (
        "uplink:\n  video:\n    width: 1280\n",
        "uplink.video.width: '1280' is not allowed; expected at most camera.width (640): the guidance stream is a smaller copy"
    ),
    (
        "uplink:\n  video:\n    height: 361\n",
        "uplink.video.height: '361' is not allowed; expected an even integer 16...4096 (given at FILE:3)"
    ),
    (
        "uplink:\n  video:\n    preference: libx265\n",
        "uplink.video.preference: 'libx265' is not allowed; expected a non-empty list of non-empty strings (given at FILE:3)"
    ),
    (
        "log:\n  level: verbose\n",
        "log.level: 'verbose' is not allowed; expected one of trace, debug, info, notice, warning, error, critical (given at FILE:2)"
    )
])
func rejectedFileValue(yaml: String, message: String) async throws {
    #expect(try await failure(yaml: yaml) == message)
}

@Test func rejectedValueNamesEnvironmentVariableOrCommandLine() async throws {
    #expect(
        try await failure(environment: ["DASHCAM_CAMERA_FPS": "ten"])
            == "camera.fps: 'ten' is not allowed; expected an integer 1...120 (given by environment variable DASHCAM_CAMERA_FPS)")
    #expect(
        try await failure(environment: ["DASHCAM_ENCODER_CRF": "52"])
            == "encoder.crf: '52' is not allowed; expected an integer 0...51 (given by environment variable DASHCAM_ENCODER_CRF)")
    #expect(
        try await failure(overrides: ["camera.fps": "ten"])
            == "camera.fps: 'ten' is not allowed; expected an integer 1...120 (given on the command line)")
    // The value that won is the one reported, not the file's.
    #expect(
        try await failure(yaml: "camera:\n  pace: fast\n", overrides: ["camera.pace": "slow"])
            == "camera.pace: 'slow' is not allowed; expected one of realtime, fast (given on the command line)")
}

@Test func invalidOptionReadsLikeARejectedKey() {
    let error = ConfigError.invalidOption("--segments", "0", "a whole number of segments, 1 or more")
    #expect(error.description == "--segments: '0' is not allowed; expected a whole number of segments, 1 or more")
    #expect(error.key == "--segments")
}

@Test func fileSourceNeedsCameraFile() async throws {
    let error = await #expect(throws: ConfigError.self) {
        try await AgentConfig.load(file: nil, environment: ["DASHCAM_CAMERA_SOURCE": "file"])
    }
    #expect(error?.key == "camera.file")
    #expect(error?.description == "camera.file: not set, but camera.source is 'file'; set it to the video file to play")
    let config = try await AgentConfig.load(
        file: nil, environment: [:], overrides: ["camera.source": "file", "camera.file": "clip.mp4"])
    #expect(config.camera.file == "clip.mp4")
}

@Test func yamlSyntaxErrorNamesPathAndLine() async throws {
    #expect(
        try await failure(yaml: "camera:\n  fps: 10\n   width: 640\n")
            == "FILE:3: YAML syntax error: mapping values are not allowed in this context")
    #expect(
        try await failure(yaml: "camera:\n  source: [v4l2\n")
            == "FILE:3: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at line 2)")
    #expect(
        try await failure(yaml: "camera:\n  fps: 10\n  fps: 12\n")
            == "FILE:2: YAML syntax error: 'fps' is given more than once")
}

@Test func missingOrUnreadableFileNamesPath() async throws {
    let missing = "/nonexistent/dashcam/config.yaml"
    let error = await #expect(throws: ConfigError.self) {
        try await AgentConfig.load(file: missing, environment: [:])
    }
    #expect(error?.description == "/nonexistent/dashcam/config.yaml: config file not found")

    let directory = FileManager.default.temporaryDirectory.path
    let unreadable = await #expect(throws: ConfigError.self) {
        try await AgentConfig.load(file: directory, environment: [:])
    }
    #expect(unreadable?.description == "\(directory): cannot read config file: it is a directory")
}

// MARK: - Documentation

/// Keeps device-config/README.md's key table equal to `AgentConfig.keys`, so the docs can't drift.
/// `UPDATE_CONFIG_DOCS=1 swift test --filter readmeKeyTable` rewrites the table instead.
@Test func readmeKeyTable() throws {
    let mismatch = try GeneratedSection.mismatch(
        in: deviceConfig.appendingPathComponent("README.md"), name: "GENERATED KEY TABLE",
        generated: ConfigKeyInfo.markdownTable() + "\n")
    #expect(
        mismatch == nil,
        "device-config/README.md's key table differs from AgentConfig.keys; run UPDATE_CONFIG_DOCS=1 swift test --filter readmeKeyTable"
    )
}

@Test func speechAndHapticsKeysAreReadFromYAML() async throws {
    let yaml = """
        speech:
          locale: ko-KR
          sink: wav:/tmp/speech
          device: hw:1,0
        haptics:
          chip: gpio-sim.0-node0
          line: 5
          activeLow: true
          required: false
          clear: [100]
          alert: [60, 40, 60]
        status:
          socket: /tmp/agent.sock
        """
    let config = try await withYAML(yaml) { try await AgentConfig.load(file: $0, environment: [:]) }
    #expect(config.speech.locale == "ko-KR" && config.speech.sink == "wav:/tmp/speech" && config.speech.device == "hw:1,0")
    // A bare number in YAML is the line's offset, kept as text until the line is opened.
    #expect(config.haptics.line == "5")
    #expect(config.haptics.chip == "gpio-sim.0-node0")
    #expect(config.haptics.activeLow && !config.haptics.required)
    #expect(config.haptics.clear == [100] && config.haptics.alert == [60, 40, 60])
    #expect(config.status.socket == "/tmp/agent.sock")
}

@Test(arguments: [
    (
        "haptics:\n  clear: [0]\n",
        "haptics.clear: '[0]' is not allowed; expected a list of 1 to 16 integers, each 1...5000 (given at FILE:2)"
    ),
    ("haptics:\n  alert: []\n", "haptics.alert: '[]' is not allowed; expected a list of 1 to 16 integers, each 1...5000 (given at FILE:2)"),
    ("haptics:\n  required: maybe\n", "haptics.required: 'maybe' is not allowed; expected true or false (given at FILE:2)"),
    ("speech:\n  sink: pulse\n", "speech.sink: 'pulse' is not allowed; expected `alsa` or `wav:DIR`")
])
func rejectedVoiceAndTouchValue(yaml: String, message: String) async throws {
    #expect(try await failure(yaml: yaml) == message)
}

@Test func theDeviceLocaleComesFromConfigThenLCAllThenLCMessagesThenLang() {
    var config = AgentConfig()
    #expect(config.deviceLocale(environment: [:]) == "en-US")
    #expect(config.deviceLocale(environment: ["LANG": "ko_KR.UTF-8"]) == "ko-KR")
    #expect(config.deviceLocale(environment: ["LANG": "ko_KR.UTF-8", "LC_MESSAGES": "ja_JP.UTF-8"]) == "ja-JP")
    #expect(config.deviceLocale(environment: ["LC_ALL": "de_DE@euro", "LC_MESSAGES": "ja_JP.UTF-8"]) == "de-DE")
    // An empty variable is unset; `C` is set and means no language.
    #expect(config.deviceLocale(environment: ["LC_ALL": "", "LANG": "fr_FR.UTF-8"]) == "fr-FR")
    #expect(config.deviceLocale(environment: ["LC_ALL": "C", "LANG": "fr_FR.UTF-8"]) == "en-US")
    config.device.locale = "pt-BR"
    #expect(config.deviceLocale(environment: ["LC_ALL": "ko_KR.UTF-8"]) == "pt-BR")
}

// MARK: - The device's one language

@Test func deviceLocaleFromTheFileBeatsLangAndTheEnvironmentVariableBeatsTheFile() async throws {
    try await withYAML("device:\n  locale: ko-KR\n") { path in
        let config = try await AgentConfig.load(file: path, environment: [:])
        #expect(config.device.locale == "ko-KR")
        #expect(config.deviceLocale(environment: ["LANG": "en_US.UTF-8"]) == "ko-KR")
        #expect(config.localeNotices.isEmpty)
        let overridden = try await AgentConfig.load(file: path, environment: ["DASHCAM_DEVICE_LOCALE": "ja-JP"])
        #expect(overridden.deviceLocale(environment: ["LANG": "en_US.UTF-8"]) == "ja-JP")
    }
}

@Test func withoutDeviceLocaleTheProcessLocaleDecides() async throws {
    let config = try await withYAML("camera:\n  fps: 10\n") { try await AgentConfig.load(file: $0, environment: [:]) }
    #expect(config.configuredLocale == nil)
    #expect(config.deviceLocale(environment: ["LANG": "ko_KR.UTF-8"]) == "ko-KR")
    #expect(config.deviceLocale(environment: ["LANG": "C.UTF-8"]) == "en-US")
    #expect(config.deviceLocale(environment: [:]) == "en-US")
}

@Test func theDemoAndTheDefaultConfigUseDeviceLocaleOnly() async throws {
    let demo = try await load("demo-stream.yaml")
    #expect(demo.device.locale == "ko-KR" && demo.uplink.locale == nil && demo.speech.locale == nil)
    #expect(demo.deviceLocale(environment: ["LANG": "en_US.UTF-8"]) == "ko-KR")
    #expect(demo.localeNotices.isEmpty)
    #expect(try await load("default.yaml").localeNotices.isEmpty)
    // The vision demo plays opencv-doc's footage at its own size.
    let vision = try await load("demo-vision.yaml")
    #expect(vision.camera.source == .file && vision.camera.file == "/usr/share/doc/opencv-doc/examples/data/vtest.avi")
    #expect(vision.camera.width == 768 && vision.camera.height == 576 && vision.device.locale == "ko-KR")
}

@Test(arguments: ["uplink", "speech"])
func theOldLocaleKeysStillSetTheDeviceLanguageWithANotice(section: String) async throws {
    let config = try await withYAML("\(section):\n  locale: ko-KR\n") { try await AgentConfig.load(file: $0, environment: [:]) }
    #expect(config.deviceLocale(environment: ["LANG": "en_US.UTF-8"]) == "ko-KR")
    #expect(
        config.localeNotices == ["config: \(section).locale is deprecated; use device.locale: ko-KR (it sets the device's one language)"])
    // The same language under both names is no conflict, in any case.
    let both = try await withYAML("device:\n  locale: ko-KR\n\(section):\n  locale: KO-kr\n") {
        try await AgentConfig.load(file: $0, environment: [:])
    }
    #expect(both.deviceLocale(environment: [:]) == "ko-KR")
    #expect(both.localeNotices.count == 1)
}

@Test(arguments: [
    (
        "device:\n  locale: ko-KR\nuplink:\n  locale: en-US\n",
        "uplink.locale: 'en-US' is not allowed; expected unset or ko-KR, as device.locale says: uplink.locale is an old name of device.locale, and a device has one language"
    ),
    (
        "device:\n  locale: ko-KR\nspeech:\n  locale: de-DE\n",
        "speech.locale: 'de-DE' is not allowed; expected unset or ko-KR, as device.locale says: speech.locale is an old name of device.locale, and a device has one language"
    ),
    (
        "uplink:\n  locale: ko-KR\nspeech:\n  locale: en-US\n",
        "speech.locale: 'en-US' is not allowed; expected unset or ko-KR, as uplink.locale says: speech.locale is an old name of device.locale, and a device has one language"
    )
])
func twoLanguagesForOneDeviceAreAConfigError(yaml: String, message: String) async throws {
    #expect(try await failure(yaml: yaml) == message)
}

@Test func anEnvironmentVariableThatDisagreesWithAnOldKeyInTheFileIsNamed() async throws {
    let message = try await failure(yaml: "uplink:\n  locale: ko-KR\n", environment: ["DASHCAM_DEVICE_LOCALE": "en-US"])
    #expect(message.hasPrefix("uplink.locale: 'ko-KR' is not allowed; expected unset or en-US, as device.locale says"))
}

@Test(arguments: [
    ("device:\n  locale: korean\n", "device.locale", "korean"),
    ("device:\n  locale: ko_KR.UTF-8\n", "device.locale", "ko_KR.UTF-8"),
    ("device:\n  locale: ko-\n", "device.locale", "ko-"),
    ("uplink:\n  locale: english\n", "uplink.locale", "english"),
    ("speech:\n  locale: en US\n", "speech.locale", "en US")
])
func aLocaleThatIsNoLanguageTagIsRefusedNamingKeyValueAndWhatIsAllowed(yaml: String, key: String, value: String) async throws {
    #expect(
        try await failure(yaml: yaml)
            == "\(key): '\(value)' is not allowed; expected a BCP 47 language tag such as ko-KR, en-US, es-419 or zh-Hant-TW")
}

@Test func everyBoardProfileLoadsAndNamesCameraEncoderSpeech() async throws {
    let boards = deviceConfig.appendingPathComponent("boards")
    let files = try FileManager.default.contentsOfDirectory(atPath: boards.path).filter { $0.hasSuffix(".yaml") }.sorted()
    #expect(
        files == [
            "nvidia-jetson.yaml", "raspberry-pi-4-usb-webcam.yaml", "raspberry-pi-4.yaml", "raspberry-pi-5.yaml", "rockchip-rk3588.yaml",
            "usb-webcam.yaml"
        ])
    for file in files {
        let config = try await AgentConfig.load(file: boards.appendingPathComponent(file).path, environment: [:])
        #expect(config.camera.device == "/dev/dashcam-camera", "\(file)")
        #expect(config.encoder.preference.last == "libx264", "\(file): software encoding is always the last resort")
        #expect(config.speech.sink == "alsa", "\(file)")
        // Evidence at full HD, the guidance copy small: two streams on every board.
        #expect((config.camera.width, config.camera.height, config.camera.fps) == (1920, 1080, 30), "\(file)")
        #expect(config.guidanceFormat == VideoFormat(width: 640, height: 360, fps: 10), "\(file)")
        #expect(config.guidanceEncoderSettings?.preference == ["libx265"], "\(file)")
    }
    let pi4 = try await AgentConfig.load(file: boards.appendingPathComponent("raspberry-pi-4.yaml").path, environment: [:])
    #expect(pi4.encoder.preference == ["h264_v4l2m2m", "libx264"], "the Pi 4's encoder is H.264 only")
    #expect(pi4.haptics.chip == "gpiochip0" && pi4.haptics.line == "17")
    let webcam = try await AgentConfig.load(file: boards.appendingPathComponent("raspberry-pi-4-usb-webcam.yaml").path, environment: [:])
    #expect(webcam.encoder.preference == pi4.encoder.preference && webcam.haptics == pi4.haptics, "the same board")
}

@Test func theKeysSIGHUPReloadsAreTheOnesDocumentedSo() {
    let documented = Set(AgentConfig.keys.filter { $0.summary.contains("Reloaded on SIGHUP") }.map(\.name))
    #expect(documented == AgentConfig.reloadableKeys)
    #expect(AgentConfig.reloadableKeys.isSubset(of: Set(AgentConfig.keys.map(\.name))))
}

@Test func aReloadAppliesWhatItCanNamesWhatNeedsARestartAndSurvivesABadFile() async throws {
    let files = Mutex<[Result<AgentConfig, ConfigError>]>([])
    let applied = Mutex<[AgentConfig]>([])
    var edited = AgentConfig()
    edited.recording.maxMegabytes = 500
    edited.log.level = .debug
    edited.camera.fps = 25
    files.withLock {
        $0 = [.success(edited), .failure(.invalidOption("haptics.clear", "[0]", "a list of 1 to 16 integers")), .success(edited)]
    }
    var reloader = ConfigReloader(running: AgentConfig(), logger: Logger(label: "test")) {
        try files.withLock { $0.removeFirst() }.get()
    } apply: { config in
        applied.withLock { $0.append(config) }
    }

    let first = await reloader.reload()
    #expect(first.applied == ["recording.maxMegabytes", "log.level"] && first.needRestart == ["camera.fps"] && first.error == nil)
    #expect(reloader.running.recording.maxMegabytes == 500 && reloader.running.camera.fps == AgentConfig().camera.fps)

    let broken = await reloader.reload()
    #expect(broken.error?.contains("haptics.clear") == true && broken.applied.isEmpty)
    #expect(reloader.running.log.level == .debug, "the running config stays")

    // Nothing new to apply; the key that needs a restart is still named.
    let again = await reloader.reload()
    #expect(again.applied.isEmpty && again.needRestart == ["camera.fps"])
    #expect(applied.withLock { $0.count } == 1)
}

@Test func loggersAlreadyMadeFollowAReloadedLevel() {
    let level = Reloadable(Logger.Level.info)
    let logger = Logger(label: "test") { ReloadableLevelLogHandler(label: $0, level: level) }
    #expect(logger.logLevel == .info)
    level.current = .debug
    #expect(logger.logLevel == .debug, "a copy made before the reload sees the new level")
}

@Test func oneUplinkVideoKeyMakesTwoStreamsWithTheOthersAtTheirDefaults() async throws {
    let one = try await AgentConfig.load(file: nil, environment: [:])
    #expect(one.guidanceEncoderSettings == nil)
    #expect(one.pipelineSettings(maxSegments: nil).guidance == nil)
    #expect(one.encoderSettings.codecs == [.hevc], "one stream is sent: HEVC only")

    let yaml = "camera:\n  width: 1920\n  height: 1080\n  fps: 30\nuplink:\n  video:\n    fps: 5\n"
    let two = try await withYAML(yaml) { try await AgentConfig.load(file: $0, environment: [:]) }
    let guidance = try #require(two.guidanceEncoderSettings)
    #expect(guidance.format == VideoFormat(width: 640, height: 360, fps: 5))
    #expect(guidance.preference == ["libx265"] && guidance.rateControl == .crf(28) && guidance.codecs == [.hevc])
    #expect(guidance.keyframeInterval == 25)
    #expect(two.encoderSettings.codecs == [.hevc, .h264])
    #expect(two.encoderSettings.format == VideoFormat(width: 1920, height: 1080, fps: 30))
    #expect(two.pipelineSettings(maxSegments: nil).guidance == guidance)
}
