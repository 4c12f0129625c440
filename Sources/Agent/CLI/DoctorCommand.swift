import ArgumentParser
import ConfigSupport
import FFmpegLog
import Foundation
import GuidanceProtocol
import HAL
import Logging
import NIOPosix
import UTC

/// `dashcam-agent doctor`: everything a first install needs, checked once, as a list with the
/// fix for each failure. Exit 0 when nothing failed, 1 otherwise.
struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract:
            "Check camera, encoder, motor, speaker, voice, recording folder, clock, token and server; print the fix for each failure.",
        discussion: """
            Run it with the service stopped (sudo systemctl stop dashcam-agent): the running agent holds \
            the camera and the motor's line. Exit status 0 when no check failed, 1 otherwise.
            """)

    static let installedConfig = "/etc/dashcam-agent/agent.yaml"

    @Option(help: "YAML config file (default: \(installedConfig) when it exists).")
    var config: String?

    @Flag(help: "Do not pulse the vibration motor.")
    var noBuzz = false

    @Flag(help: "Do not speak the test phrase.")
    var quiet = false

    @Flag(help: "Print JSON instead of a checklist.")
    var json = false

    @Flag(
        help:
            "Only try each encoder of encoder.preference and uplink.video.preference at the configured sizes on a few seconds of generated video: whether it opens, its frames a second, its CPU share, and whether both streams together keep up with the camera."
    )
    var encoders = false

    func run() async throws {
        let file = config ?? (FileManager.default.fileExists(atPath: Self.installedConfig) ? Self.installedConfig : nil)
        let loaded: AgentConfig
        do {
            loaded = try await AgentConfig.load(file: file)
        } catch {
            throw ExitStatus.report(error)
        }
        // FFmpeg's own errors (an encoder that does not open says why) on standard error in the
        // agent's log format; its warnings and chatter not at all. Standard output is the report's.
        FFmpegLog.route(level: .error)
        ALSALog.route(level: .error)
        if encoders {
            try await encoderReport(loaded, file: file)
            return
        }
        var logger = Logger(label: "doctor")
        logger.logLevel = .critical
        let doctor = Doctor(config: loaded, logger: logger, buzz: !noBuzz, speak: !quiet)
        let checks = await doctor.run()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(Doctor.Report(config: file, checks: checks)), as: UTF8.self))
        } else {
            print("dashcam-agent doctor (\(file ?? "built-in defaults"))")
            for check in checks {
                print("[\(check.outcome.mark)] \(check.name): \(check.detail)")
                if let fix = check.fix { print("       fix: \(fix)") }
            }
            let failed = checks.filter { $0.outcome == .failed }.count
            print(failed == 0 ? "nothing failed" : "\(failed) check(s) failed")
        }
        if checks.contains(where: { $0.outcome == .failed }) { throw ExitCode.failure }
    }
}

extension DoctorCommand {
    /// `doctor --encoders`: what ``EncoderBench`` measured, for people or as JSON.
    func encoderReport(_ config: AgentConfig, file: String?) async throws {
        let report = try await Doctor.offThePool { EncoderBench(config: config).run() }.get()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(
                "dashcam-agent doctor --encoders (\(file ?? "built-in defaults")): each encoder on \(EncoderBench(config: config).seconds) s of generated video"
            )
            for line in EncoderBench.text(report, cameraFPS: config.camera.fps) { print(line) }
        }
        if report.together?.sustains != true { throw ExitCode.failure }
    }
}

/// The checks of ``DoctorCommand``, in the order a first install meets them.
struct Doctor: Sendable {
    struct Check: Codable, Sendable, Equatable {
        enum Outcome: String, Codable, Sendable {
            case ok, warning, failed, skipped
            var mark: String {
                switch self {
                case .ok: "ok"
                case .warning: "!!"
                case .failed: "FAIL"
                case .skipped: "--"
                }
            }
        }
        var name: String
        var outcome: Outcome
        var detail: String
        var fix: String?
    }

    struct Report: Codable {
        var config: String?
        var checks: [Check]
    }

    let config: AgentConfig
    let logger: Logger
    let buzz: Bool
    let speak: Bool

    func run() async -> [Check] {
        var checks: [Check] = []
        checks.append(await camera())
        checks += await encoders()
        checks.append(await motor())
        checks += await speaker()
        checks.append(recordingFolder())
        checks.append(clock())
        let token = self.token()
        checks.append(token.check)
        checks.append(await server(token: token.value))
        return checks
    }

    // MARK: - Camera and encoder

    func camera() async -> Check {
        guard config.camera.source == .v4l2 else {
            return Check(name: "camera", outcome: .skipped, detail: "camera.source is \(config.camera.source.rawValue): no camera to check")
        }
        let path = config.camera.device
        let config = self.config, logger = self.logger
        let result: Result<(VideoFormat, Int), any Error> = await Self.offThePool {
            let source = config.makeSource(logger: logger)
            defer { source.close() }
            let granted = try source.open()
            var frames = 0
            let deadline = ContinuousClock.now + .seconds(5)
            while frames < 5, ContinuousClock.now < deadline {
                if try source.nextFrame() != nil { frames += 1 }
            }
            return (granted, frames)
        }
        switch result {
        case .success(let (granted, frames)):
            guard frames > 0 else {
                return Check(
                    name: "camera", outcome: .failed, detail: "\(path) opened but gave no frame in 5 s",
                    fix: "check the cable and the camera's power; `dashcam-agent probe` lists what it offers")
            }
            var notes: [String] = []
            let wanted = config.videoFormat
            if granted.width != wanted.width || granted.height != wanted.height || granted.fps != wanted.fps {
                notes.append(
                    "asked \(wanted.width)x\(wanted.height)@\(wanted.fps), the camera gives \(granted.width)x\(granted.height)@\(granted.fps)"
                )
            }
            if path.range(of: #"^/dev/video[0-9]+$"#, options: .regularExpression) != nil {
                notes.append("\(path) can name another device after a reboot or a replug")
            }
            let detail = "\(path): \(frames) frames at \(granted.width)x\(granted.height)@\(granted.fps)"
            guard notes.isEmpty else {
                return Check(
                    name: "camera", outcome: .warning, detail: "\(detail); \(notes.joined(separator: "; "))",
                    fix: "use /dev/dashcam-camera or a /dev/v4l/by-id/ path, and a size and rate `dashcam-agent probe` lists")
            }
            return Check(name: "camera", outcome: .ok, detail: detail)
        case .failure(let error):
            let text = "\(error)"
            if let error = error as? SourceError, error.isNotFound {
                return Check(
                    name: "camera", outcome: .failed, detail: text,
                    fix: "plug the camera in; `dashcam-agent probe` lists the cameras; set camera.device to the one to use")
            }
            if text.localizedCaseInsensitiveContains("busy") {
                return Check(
                    name: "camera", outcome: .failed, detail: text,
                    fix: "another program holds it, most likely the running agent: sudo systemctl stop dashcam-agent, then run doctor again"
                )
            }
            if text.localizedCaseInsensitiveContains("permission") {
                return Check(
                    name: "camera", outcome: .failed, detail: text, fix: "run doctor with sudo (the camera belongs to the video group)")
            }
            return Check(
                name: "camera", outcome: .failed, detail: text,
                fix: "`dashcam-agent probe` shows what the camera offers; match camera.width, height, fps and pixelFormat to it")
        }
    }

    /// The recording's encoder and, with two streams, the guidance copy's; each opened as `record`
    /// opens it, with the data an hour of evidence takes (its bitrate, or what its CRF is about).
    func encoders() async -> [Check] {
        var checks = [
            await encoder(
                config.encoderSettings, name: config.guidanceFormat == nil ? "encoder" : "evidence",
                keys: "encoder.preference",
                fix: "keep libx264 or libx265 last in encoder.preference (sudo apt install libavcodec-extra for more)")
        ]
        if let guidance = config.guidanceEncoderSettings {
            checks.append(
                await encoder(
                    guidance, name: "guidance", keys: "uplink.video.preference",
                    fix: "keep libx265 in uplink.video.preference: the server takes HEVC"))
        }
        return checks
    }

    private func encoder(_ settings: EncoderSettings, name: String, keys: String, fix: String) async -> Check {
        let result: Result<(String, VideoCodec, [(name: String, reason: String)]), any Error> = await Self.offThePool {
            let encoder = try LibavEncoder(settings: settings, inputFormat: .yuv420p)
            return (encoder.name, encoder.codec, encoder.skipped)
        }
        let size = "\(settings.format)"
        switch result {
        case .success(let (encoder, codec, skipped)):
            var detail = "\(encoder) (\(codec.displayName)) opens at \(size)"
            let kbps: Int =
                switch settings.rateControl {
                case .bitrate(let kbps, _, _): kbps
                case .crf(let crf): LibavEncoder.bitrateKbps(forCRF: crf, format: settings.format, codec: codec)
                }
            let megabytesPerHour = Double(kbps) * 1000 / 8 * 3600 / 1_048_576
            detail += String(format: "; about %.0f MB an hour (%d kbit/s)", megabytesPerHour, kbps)
            if name != "guidance", let cap = config.retention.maxBytes {
                detail += String(format: ", so the recording folder holds about %.1f hours", Double(cap) / 1_048_576 / megabytesPerHour)
            }
            if !skipped.isEmpty { detail += "; passed over " + skipped.map { "\($0.name) (\($0.reason))" }.joined(separator: ", ") }
            return Check(name: name, outcome: .ok, detail: detail)
        case .failure(let error):
            return Check(
                name: name, outcome: .failed,
                detail: "none of \(settings.preference.joined(separator: ", ")) (\(keys)) opens at \(size): \(error)",
                fix: fix)
        }
    }

    // MARK: - Motor, speaker, voice

    func motor() async -> Check {
        guard config.haptics.chip != nil else {
            return Check(
                name: "motor", outcome: config.haptics.required ? .failed : .skipped, detail: "no haptics.chip set: no vibration motor",
                fix: config.haptics.required
                    ? "set haptics.chip and haptics.line from your board's profile, or haptics.required: false" : nil)
        }
        let haptics: Haptics
        let pattern: HapticPattern
        do {
            haptics = try config.makeHaptics(logger: logger)
            pattern = try config.hapticPatterns().clear
        } catch {
            let text = "\(error)"
            return Check(
                name: "motor", outcome: .failed, detail: text,
                fix: text.localizedCaseInsensitiveContains("busy")
                    ? "the running agent holds the line: sudo systemctl stop dashcam-agent, then run doctor again"
                    : "check haptics.chip and haptics.line against `gpioinfo`; run doctor with sudo (the line belongs to the gpio group)")
        }
        defer { haptics.close() }
        guard buzz else { return Check(name: "motor", outcome: .ok, detail: "\(haptics.lineDescription) requested (no buzz: --no-buzz)") }
        haptics.play(pattern)
        try? await Task.sleep(for: .milliseconds(600))
        return Check(name: "motor", outcome: .ok, detail: "\(haptics.lineDescription): buzzed the `clear` pattern; you should have felt it")
    }

    func speaker() async -> [Check] {
        let voice = config.makeVoice(logger: logger)
        defer { voice.close() }
        let locale = voice.deviceLocale
        let choice = voice.voice(for: locale)
        let voiceCheck =
            choice.fellBack
            ? Check(
                name: "voice", outcome: .warning, detail: "no eSpeak-ng voice speaks \(locale): English is spoken instead",
                fix: "sudo apt install espeak-ng-data, or set device.locale to a language eSpeak-ng has")
            : Check(name: "voice", outcome: .ok, detail: "\(locale) is spoken by the eSpeak-ng voice '\(choice.voice)'")
        if let problem = voice.problem {
            let fix =
                problem.hasPrefix("eSpeak-ng")
                ? "sudo apt install libespeak-ng1 espeak-ng-data"
                : problem.localizedCaseInsensitiveContains("busy")
                    ? "another program plays on it, most likely the running agent: sudo systemctl stop dashcam-agent, then run doctor again"
                    : "check speech.device against `aplay -L`; run doctor with sudo (the sound card belongs to the audio group)"
            return [Check(name: "speaker", outcome: .failed, detail: problem, fix: fix), voiceCheck]
        }
        guard speak else { return [Check(name: "speaker", outcome: .skipped, detail: "\(voice.output): not tried (--quiet)"), voiceCheck] }
        let before = voice.stats?.failures ?? 0
        voice.announce([.ready])
        await voice.waitUntilIdle()
        let failures = (voice.stats?.failures ?? 0) - before
        let text = voice.statusText([.ready])
        guard failures == 0 else {
            return [
                Check(
                    name: "speaker", outcome: .failed, detail: "\(voice.output): the test phrase could not be played",
                    fix: "check speech.device against `aplay -L`; run doctor with sudo (the sound card belongs to the audio group)"),
                voiceCheck
            ]
        }
        return [Check(name: "speaker", outcome: .ok, detail: "\(voice.output): said \"\(text)\"; you should have heard it"), voiceCheck]
    }

    // MARK: - Recording folder and clock

    func recordingFolder() -> Check {
        let dir = config.recording.dir
        guard let space = FileSystemSpace(nearest: dir) else {
            return Check(name: "recording", outcome: .failed, detail: "\(dir): cannot measure its disk", fix: "check the disk is mounted")
        }
        guard access(space.path, W_OK) == 0 else {
            return Check(
                name: "recording", outcome: .failed, detail: "\(space.path) is not writable here",
                fix:
                    "run doctor with sudo, or choose a recording.dir the service user may write (deploy/README.md, \"Recording to another disk\")"
            )
        }
        let free = space.available >> 20
        let cap = config.retention.maxBytes.map { "kept under \($0 >> 20) MB" } ?? "no cap"
        let detail = "\(dir)\(space.path == dir ? "" : " (made at start)"): \(free) MB free, segments \(cap)"
        guard free > config.recording.minFreeMegabytes + 64 else {
            return Check(
                name: "recording", outcome: .warning, detail: detail,
                fix:
                    "the disk is nearly full: free space, or a bigger card; the loop deletes old segments to keep \(config.recording.minFreeMegabytes) MB free"
            )
        }
        return Check(name: "recording", outcome: .ok, detail: detail)
    }

    func clock() -> Check {
        let now = Date()
        let year = Calendar(identifier: .gregorian).component(.year, from: now)
        if year < 2025 {
            return Check(
                name: "clock", outcome: .failed, detail: "the clock says \(now.rfc3339Milliseconds)",
                fix:
                    "connect to a network and enable time sync: sudo timedatectl set-ntp true (day folders and `protect 09:30..` use this clock)"
            )
        }
        switch WallClock.isSynchronised {
        case true?:
            // Which source: chrony's GPS reference clock, or NTP.
            let reference = ClockService.chronyReference()
            let source = ClockRules.source(synced: true, reference: reference)
            return Check(
                name: "clock", outcome: .ok,
                detail:
                    "\(now.rfc3339Milliseconds), synchronised by \(source == "gps" ? "GPS" : "NTP")\(reference.map { " (chrony: \($0))" } ?? "")"
            )
        case false?:
            return Check(
                name: "clock", outcome: .warning, detail: "\(now.rfc3339Milliseconds), not synchronised",
                fix:
                    "sudo timedatectl set-ntp true, or chrony with gpsd as a reference clock (deploy/chrony/); a board without a clock battery starts at a wrong time until then"
            )
        case nil:
            return Check(
                name: "clock", outcome: .warning, detail: "\(now.rfc3339Milliseconds); the kernel cannot say whether it is synchronised")
        }
    }

    // MARK: - Token and server

    func token() -> (check: Check, value: String?) {
        guard config.uplink.url != nil else {
            return (Check(name: "token", outcome: .skipped, detail: "no uplink.url: the agent records and checks the road itself"), nil)
        }
        do {
            let token = try TokenFile.read(config.uplink.tokenFile)
            return (Check(name: "token", outcome: .ok, detail: "\(config.uplink.tokenFile) holds a token"), token)
        } catch {
            return (
                Check(
                    name: "token", outcome: .failed, detail: error.description,
                    fix:
                        "ask the server's operator for a token (guidance-server token add DEVICE), then: printf '%s\\n' TOKEN | sudo tee \(config.uplink.tokenFile) >/dev/null; sudo chmod 600 \(config.uplink.tokenFile)"
                ),
                nil
            )
        }
    }

    func server(token: String?) async -> Check {
        guard let url = config.uplink.url else {
            return Check(name: "server", outcome: .skipped, detail: "no uplink.url")
        }
        guard let token else { return Check(name: "server", outcome: .skipped, detail: "\(url): not tried without a token") }
        let options = WebSocketConnectOptions(
            url: url, headers: [("Authorization", "Bearer \(token)")], tls: config.uplinkTLS(url: url),
            deadline: .seconds(5), maxMessageBytes: GuidanceProtocol.maxMessageBytes)
        let connection: WebSocketConnection
        do {
            connection = try await WebSocketConnection.connect(options, logger: logger)
        } catch {
            switch error {
            case .refused(let status, _) where status == 401 || status == 403:
                return Check(
                    name: "server", outcome: .failed, detail: "\(url) refused the token (HTTP \(status))",
                    fix: "the token in \(config.uplink.tokenFile) is not the server's: ask its operator for the device's token")
            case .refused(let status, _):
                return Check(
                    name: "server", outcome: .failed, detail: "\(url) answered HTTP \(status)",
                    fix: status == 404
                        ? "check the path of uplink.url (/v1/stream)" : "the server or its proxy is not ready; try again later")
            case .timedOut:
                return Check(
                    name: "server", outcome: .failed, detail: "\(url): no answer within 5 s",
                    fix: "check the board's network and that the server's port 443 is open")
            case .failed(let reason):
                let tls =
                    reason.localizedCaseInsensitiveContains("certificate") || reason.localizedCaseInsensitiveContains("tls")
                    || reason.localizedCaseInsensitiveContains("ssl")
                return Check(
                    name: "server", outcome: .failed, detail: "\(url): \(reason)",
                    fix: tls
                        ? "the server's certificate does not verify for its host name (or set uplink.caFile); check the clock too"
                        : "check the host name in uplink.url and the board's network")
            }
        }
        defer { connection.abort() }
        let welcome: ServerMessage? = await withTaskGroup(of: ServerMessage?.self) { group in
            group.addTask {
                guard (try? await connection.send(text: ClientMessage.hello(config.uplinkHello()).encoded())) != nil else { return nil }
                for await inbound in connection.inbound {
                    if case .text(let text) = inbound, let message = try? ServerMessage.decode(text) { return message }
                }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        await connection.close(code: 1000, reason: "doctor", grace: .milliseconds(500))
        switch welcome {
        case .welcome(_, let remaining)?:
            let usage = remaining.map { "\($0 / 60) minutes of guidance left" } ?? "unlimited guidance"
            return Check(name: "server", outcome: .ok, detail: "\(url) accepted the token: \(usage)")
        case .error(let code, let message, _)?:
            return Check(
                name: "server", outcome: .failed, detail: "\(url) answered \(code.rawValue): \(message)", fix: "tell the server's operator")
        default:
            return Check(
                name: "server", outcome: .failed, detail: "\(url) took the connection but did not welcome the device in 5 s",
                fix: "the server may be overloaded or not a guidance server; tell its operator")
        }
    }

    /// Blocking device work on the blocking pool, not the cooperative one.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async -> Result<T, any Error> {
        do {
            return .success(try await NIOThreadPool.singleton.runIfActive(body))
        } catch {
            return .failure(error)
        }
    }
}
