import ArgumentParser
import ConfigSupport
import FFmpegLog
import Foundation
import HAL
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record segments to a folder and print one JSON line of metadata per segment."
    )

    @Option(help: "YAML config file (see device-config/).")
    var config: String?

    @Option(help: "Recording folder (overrides recording.dir).")
    var out: String?

    @Option(help: "Stop after this many segments.")
    var segments: Int?

    @Option(help: "v4l2[:DEVICE], test-pattern or file:PATH (overrides camera.source).")
    var source: String?

    @Flag(help: "Feed test-pattern and file sources as fast as possible (camera.pace: fast).")
    var fast = false

    @Option(name: .customLong("set"), help: ArgumentHelp(
        "Set a config key for this run, over the file and the environment (repeatable).", valueName: "KEY=VALUE"))
    var settings: [String] = []

    func run() async throws {
        HeapPolicy.mapBuffers(from: 256 << 10)
        do {
            try await record()
        } catch let exit as ExitCode {
            throw exit
        } catch {
            throw ExitStatus.report(error)
        }
    }

    private func record() async throws {
        if let segments, segments < 1 {
            throw ConfigError.invalidOption("--segments", "\(segments)", "a whole number of segments, 1 or more")
        }
        let overrides = try overrides()
        let config = try await AgentConfig.load(file: self.config, overrides: overrides)
        let logLevel = Reloadable(config.log.level)
        LoggingSystem.bootstrap { ReloadableLevelLogHandler(label: $0, level: logLevel) }
        FFmpegLog.route()
        ALSALog.route()
        let logger = Logger(label: "dashcam-agent")
        // Trapped before anything starts: SIGHUP's default would end the agent.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        // Measures the disk once (the default cap is a share of it).
        let retention = config.retention
        let store = try RecordingStore(
            directory: config.recording.dir, retention: retention, segmentSeconds: config.encoder.segmentSeconds)
        StoredSegment.warnAboutSymbolicLinks(in: store.root, logger: logger)
        if !store.removedLeftovers.isEmpty {
            logger.notice("recording: removed \(store.removedLeftovers.count) temporary file(s) an interrupted run left in \(config.recording.dir)")
        }
        // The local road checks look at the frames the camera already gives (no decode).
        let watch: RoadWatch?
        do {
            watch = try RoadWatch(fps: config.offline.fps, maxCpuPercent: config.offline.maxCpuPercent)
            if let problem = watch?.detectorProblem {
                logger.error("guidance: local checks will not look for people: \(problem)")
            }
        } catch {
            logger.error("guidance: no local checks: \(error)")
            watch = nil
        }
        // GPS: each segment's track is cut from the fixes gpsd sent (sensors.gps.gpsd).
        let gps = config.makeGPS(logger: logger)
        var pipelineSettings = config.pipelineSettings(maxSegments: segments)
        if let track = gps?.track { pipelineSettings.locate = { track.points(from: $0, to: $1) } }
        // The wall clock: each segment's metadata says where its time came from.
        let clock = ClockService(logger: logger)
        pipelineSettings.clockSource = { clock.source }
        // Parking mode: the camera at parking.fps, clips on motion and impact (parking.ignition).
        pipelineSettings.parked = config.parkedCapture(logger: logger)
        let pipeline = try CapturePipeline(
            source: config.makeSource(logger: logger), settings: pipelineSettings,
            encoder: { try config.makeEncoder(inputFormat: $0, logger: logger) },
            guidanceEncoder: { try config.makeGuidanceEncoder(inputFormat: $0, logger: logger) }, tap: watch, logger: logger)
        if let cap = retention.maxBytes {
            let source = config.recording.maxMegabytes != nil
                ? "recording.maxMegabytes" : "\(AgentConfig.defaultCapPercent) % of its disk; recording.maxMegabytes sets another"
            logger.info("recording: \(config.recording.dir): segments kept under \(cap >> 20) MB (\(source))")
        }

        // A car with neither a token file nor credentials pairs itself (the code is spoken); the
        // uplink connects with the credentials once they are there.
        let pairingClient = config.makePairingClient()
        let credentials = pairingClient.map { client in
            DeviceCredentials(path: config.uplink.credentialsFile, logger: logger) { await client.renew(refreshToken: $0) }
        }
        let uplink = try config.makeUplink(logger: logger, credentials: credentials)
        let haptics = try config.makeHaptics(logger: logger)
        let patterns = try config.hapticPatterns()
        let voice = config.makeVoice(logger: logger)
        let announcer = StatusAnnouncer { phrases in voice.announce(phrases) }
        let board = StatusBoard(AgentStatus(
            camera: .init(source: pipeline.cameraName, format: pipeline.cameraFormat, fps: config.camera.fps, state: "recording"),
            encoder: pipeline.encoderName, speech: .init(output: voice.output, locale: voice.deviceLocale),
            haptics: .init(line: haptics.lineDescription, released: false)))
        board.update { $0.recording = .init(dir: config.recording.dir) }
        if let guidance = config.guidanceFormat, let copy = pipeline.guidanceEncoderName {
            board.update { $0.streams = .init(evidence: .init(encoder: pipeline.encoderName, format: "\(config.videoFormat)"),
                                              guidance: .init(encoder: copy, format: "\(guidance)")) }
        }
        clock.show(on: board)
        let router = GuidanceRouter(voice: voice, haptics: haptics, clear: patterns.clear, alert: patterns.alert,
                                    announcer: announcer, board: board, logger: logger)
        let offline = watch.map {
            LocalGuidance(settings: config.localGuidanceSettings, watch: $0, router: router, announcer: announcer, board: board, logger: logger)
        }
        let pairing = pairingClient.flatMap { client in
            credentials.map { credentials in
                DevicePairingService(client: client, credentials: credentials, deviceName: config.uplink.deviceId,
                                     hasToken: { [tokenFile = config.uplink.tokenFile] in TokenFile.exists(tokenFile) },
                                     announcer: announcer, paired: { await uplink?.tokenAvailable() }, logger: logger)
            }
        }
        // Incidents, parked clips and `protect` go up to the owner.
        let clips = uplink.map { EventClips(store: store, uplink: $0, gps: gps?.track, board: board,
                                            segmentSeconds: config.encoder.segmentSeconds, logger: logger) }
        let control = ControlRequests(board: board, store: store, uplink: uplink, server: config.uplink.url, voice: voice,
                                      haptics: haptics, watch: watch, pairing: pairing, clips: clips)

        let reloader = ConfigReloader(running: config, logger: logger) { [file = self.config] in
            try await AgentConfig.load(file: file, overrides: overrides)
        } apply: { new in
            let patterns = try new.hapticPatterns()
            router.patterns.current = patterns
            store.retention = new.retention
            logLevel.current = new.log.level
            FFmpegLog.route()
            ALSALog.route()
            offline?.settings.current = new.localGuidanceSettings
        }

        let notifier = SystemdNotifier()
        let heartbeat = ServiceHeartbeat(
            health: pipeline.health, notifier: notifier,
            segmentDeadline: .seconds(config.encoder.segmentSeconds * 2 + 5),
            frameDeadline: .milliseconds(config.camera.pollTimeoutMs * config.camera.stallTimeouts + 1000),
            watchdogMicroseconds: ProcessInfo.processInfo.environment["WATCHDOG_USEC"],
            readyStatus: "recording \(pipeline.cameraName) with \(pipeline.encoderName)")

        // SIGTERM (systemd stopping the service) and SIGINT end the recording gracefully: the
        // group stops its services from the last to the first, each once the one after it has
        // ended. The segment in progress is closed and written, the uplink drains and closes with
        // 1001, the guidance it brought is routed; the line and the voice are released last.
        let stopRequested = StopFlag()
        let parking = config.makeParkingService(pipeline: pipeline, uplink: uplink, board: board,
                                                announce: { await announcer.say($0) }, logger: logger)
        var recording = RecordingService(
            pipeline: pipeline, store: store, uplink: uplink, board: board, logger: logger,
            started: { await announcer.started() },
            stopping: {
                stopRequested.set()
                notifier.stopping()
            },
            clipSaved: parking.map { $0.clipSaved })
        recording.clips = clips
        // A paired car (no token file) whose credentials the server refused asks it again:
        // renewed, it connects at once; refused (unpaired), it forgets them and offers a new code.
        var refused: (@Sendable () async -> Void)?
        if let credentials {
            let tokenFile = config.uplink.tokenFile
            refused = { @Sendable in
                guard !TokenFile.exists(tokenFile), credentials.isPaired else { return }
                if await credentials.checkAfterRefusal() { await uplink?.tokenAvailable() }
            }
        }
        let guidance = GuidanceService(
            router: router, announcer: announcer, board: board, cameraEvents: pipeline.events, uplink: uplink, offline: offline, voice: voice,
            speakToTheEnd: { segments != nil && !stopRequested.value },
            refused: refused)
        // First: the haptic line and the voice, whose threads are released last.
        var services: [any Service] = [HapticsService(haptics: haptics), VoiceService(voice: voice)]
        services.append(ConfigReloadService(reloader: reloader, hangups: hangups))
        services.append(clock)
        if notifier.isActive { services.append(heartbeat) }
        services.append(StatusSocket(path: config.status.socket, logger: logger, answer: control.answer))
        services.append(guidance)
        if let offline, let watch { services.append(LocalGuidanceService(guidance: offline, watch: watch)) }
        if let pairing { services.append(pairing) }
        if let gps { services.append(GPSService(receiver: gps.receiver, track: gps.track, board: board, logger: logger)) }
        // Before the G-sensor: stopped after it, so an incident it saves while stopping is still kept for upload.
        if let clips { services.append(clips) }
        if var incidents = try config.makeIncidentService(store: store, uplink: uplink, board: board, motor: haptics,
                                                          announce: { await announcer.say($0) }, logger: logger) {
            // While parked, an impact records a clip with its pre-roll instead.
            if let parking {
                incidents.parked = .init(isParked: { parking.state.isParked }, detector: config.parkedImpactSettings,
                                         impact: { pipeline.impact() })
            }
            incidents.clips = clips
            services.append(incidents)
        }
        if let parking { services.append(parking) }
        if let uplink { services.append(UplinkService(uplink: uplink, logger: logger)) }
        services.append(recording)  // last: the first to be stopped

        try await ServiceGroup(configuration: .init(
            services: services.map { service in
                // The recording ends the agent (a run of N segments, a failed encoder); the others
                // end only when told to. A status socket that cannot be made is logged and the
                // recording goes on; any other part that fails still lets the recording close in order.
                let ends: ServiceGroupConfiguration.ServiceConfiguration.TerminationBehavior =
                    service is RecordingService ? .gracefullyShutdownGroup : .ignore
                let fails: ServiceGroupConfiguration.ServiceConfiguration.TerminationBehavior =
                    service is StatusSocket ? .ignore : .gracefullyShutdownGroup
                return .init(service: service, successTerminationBehavior: ends, failureTerminationBehavior: fails)
            },
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// Flags that override config keys (CLI > environment > file > defaults).
    private func overrides() throws -> [String: String] {
        var values: [String: String] = [:]
        for setting in settings {
            guard let equals = setting.firstIndex(of: "="), equals != setting.startIndex else {
                throw ConfigError.invalidOption("--set", setting, "KEY=VALUE with a key from device-config/README.md, e.g. camera.fps=15")
            }
            values[String(setting[..<equals])] = String(setting[setting.index(after: equals)...])
        }
        if let out { values["recording.dir"] = out }
        if fast { values["camera.pace"] = "fast" }
        if let source {
            let (kind, argument) = source.split(separator: ":", maxSplits: 1).map(String.init).pair
            values["camera.source"] = kind
            switch kind {
            case "v4l2": if let argument { values["camera.device"] = argument }
            case "file":
                guard let argument else {
                    throw ConfigError.invalidOption("--source", source, "v4l2[:DEVICE], test-pattern or file:PATH")
                }
                values["camera.file"] = argument
            case "test-pattern": break
            default: throw ConfigError.invalidOption("--source", source, "v4l2[:DEVICE], test-pattern or file:PATH")
            }
        }
        return values
    }
}

/// Set once a stop was asked for (SIGTERM, SIGINT).
extension Array where Element == String {
    fileprivate var pair: (String, String?) { (self.first ?? "", self.count > 1 ? self[1] : nil) }
}

