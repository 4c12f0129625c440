import ConfigSupport
import FFmpegLog
import Foundation
import HAL
import Logging
import ServiceLifecycle
import UnixSignals

/// The agent as it runs: every part built from the configuration, and one table that says what
/// runs, in which order, and what its ending means. `record` parses its flags, loads the
/// configuration and runs this.
///
/// SIGTERM (systemd stopping the service) and SIGINT end the recording gracefully: the group
/// stops its parts from the last to the first, each once the one after it has ended. The segment
/// in progress is closed and written, the uplink drains and closes with 1001, the guidance it
/// brought is routed; the line and the voice are released last.
struct AgentSystem {
    typealias Ending = ServiceGroupConfiguration.ServiceConfiguration.TerminationBehavior

    /// One running part: a name for readers and logs, and what its ending does to the agent.
    struct Part {
        let name: String
        let service: any Service
        /// When it ends by itself. Only the recording ends the agent so; the others end when told.
        let ends: Ending
        /// When it fails: the agent stops in order (the recording still closes its segment).
        let fails: Ending

        init(_ name: String, _ service: any Service, ends: Ending = .ignore, fails: Ending = .gracefullyShutdownGroup) {
            self.name = name
            self.service = service
            self.ends = ends
            self.fails = fails
        }
    }

    /// In start order.
    let parts: [Part]
    let logger: Logger

    func run() async throws {
        logger.debug("parts: \(parts.map(\.name).joined(separator: ", "))")
        try await ServiceGroup(
            configuration: .init(
                services: parts.map {
                    .init(service: $0.service, successTerminationBehavior: $0.ends, failureTerminationBehavior: $0.fails)
                },
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        ).run()
    }
}

extension AgentSystem {
    /// Every part `config` asks for, built and wired. `segments` ends the run after that many;
    /// `reload` reads the configuration again (SIGHUP); `logLevel` is the level a reload changes.
    init(
        config: AgentConfig, segments: Int?, logLevel: Reloadable<Logger.Level>, logger: Logger,
        reload: @escaping @Sendable () async throws -> AgentConfig
    ) async throws {
        // Trapped before anything starts: SIGHUP's default would end the agent.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        // Measures the disk once (the default cap is a share of it).
        let retention = config.retention
        let store = try RecordingStore(
            directory: config.recording.dir, retention: retention, segmentSeconds: config.encoder.segmentSeconds)
        StoredSegment.warnAboutSymbolicLinks(in: store.root, logger: logger)
        if !store.removedLeftovers.isEmpty {
            logger.notice(
                "recording: removed \(store.removedLeftovers.count) temporary file(s) an interrupted run left in \(config.recording.dir)")
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
        if let track = gps?.track { pipelineSettings.track = { track.points(from: $0, to: $1) } }
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
            let source =
                config.recording.maxMegabytes != nil
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
        let board = StatusBoard(
            AgentStatus(
                camera: .init(source: pipeline.cameraName, format: pipeline.cameraFormat, fps: config.camera.fps, state: "recording"),
                encoder: pipeline.encoderName, speech: .init(output: voice.output, locale: voice.deviceLocale),
                haptics: .init(line: haptics.lineDescription, released: false)))
        board.update { $0.recording = .init(dir: config.recording.dir) }
        if let guidance = config.guidanceFormat, let copy = pipeline.guidanceEncoderName {
            board.update {
                $0.streams = .init(
                    evidence: .init(encoder: pipeline.encoderName, format: "\(config.videoFormat)"),
                    guidance: .init(encoder: copy, format: "\(guidance)"))
            }
        }
        clock.show(on: board)
        let router = GuidanceRouter(
            voice: voice, haptics: haptics, clear: patterns.clear, alert: patterns.alert,
            announcer: announcer, board: board, logger: logger)
        let localGuidance = watch.map {
            LocalGuidance(
                settings: config.localGuidanceSettings, watch: $0, router: router, announcer: announcer, board: board, logger: logger)
        }
        let pairing = pairingClient.flatMap { client in
            credentials.map { credentials in
                DevicePairingService(
                    client: client, credentials: credentials, deviceName: config.uplink.deviceId,
                    hasToken: { [tokenFile = config.uplink.tokenFile] in TokenFile.exists(tokenFile) },
                    announcer: announcer, paired: { await uplink?.tokenAvailable() }, logger: logger)
            }
        }
        // Incidents, parked clips and `protect` go up to the owner.
        let clips = uplink.map {
            EventClips(
                store: store, uplink: $0, gps: gps?.track, board: board,
                segmentSeconds: config.encoder.segmentSeconds, logger: logger)
        }
        let control = ControlRequests(
            board: board, store: store, uplink: uplink, server: config.uplink.url, voice: voice,
            haptics: haptics, watch: watch, pairing: pairing, clips: clips)

        let reloader = ConfigReloader(running: config, logger: logger, load: reload) { new in
            let patterns = try new.hapticPatterns()
            router.patterns.current = patterns
            store.retention = new.retention
            logLevel.current = new.log.level
            FFmpegLog.route()
            ALSALog.route()
            localGuidance?.settings.current = new.localGuidanceSettings
        }

        let notifier = SystemdNotifier()
        let heartbeat = ServiceHeartbeat(
            health: pipeline.health, notifier: notifier,
            segmentDeadline: .seconds(config.encoder.segmentSeconds * 2 + 5),
            frameDeadline: .milliseconds(config.camera.pollTimeoutMs * config.camera.stallTimeouts + 1000),
            watchdogMicroseconds: ProcessInfo.processInfo.environment["WATCHDOG_USEC"],
            readyStatus: "recording \(pipeline.cameraName) with \(pipeline.encoderName)")

        let stopRequested = StopFlag()
        let parking = config.makeParkingService(
            pipeline: pipeline, uplink: uplink, board: board,
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
            router: router, announcer: announcer, board: board, cameraEvents: pipeline.events, uplink: uplink, localGuidance: localGuidance,
            voice: voice,
            speakToTheEnd: { segments != nil && !stopRequested.value },
            refused: refused)
        var incidents = try config.makeIncidentService(
            store: store, uplink: uplink, board: board, motor: haptics,
            announce: { await announcer.say($0) }, logger: logger)
        // While parked, an impact records a clip with its pre-roll instead.
        if let parking {
            incidents?.parked = .init(
                isParked: { parking.state.isParked }, detector: config.parkedImpactSettings,
                impact: { pipeline.impact() })
        }
        incidents?.clips = clips

        // What runs, in the order it starts; it stops from the bottom up.
        let table: [Part?] = [
            // First: the haptic line and the voice, whose threads are released last.
            Part("haptics", HapticsService(haptics: haptics)),
            Part("voice", VoiceService(voice: voice)),
            Part("config reload (SIGHUP)", ConfigReloadService(reloader: reloader, hangups: hangups)),
            Part("wall clock", clock),
            notifier.isActive ? Part("systemd watchdog", heartbeat) : nil,
            // One that cannot be made is logged, and the recording goes on.
            Part("status socket", StatusSocket(path: config.status.socket, logger: logger, answer: control.answer), fails: .ignore),
            Part("guidance: wire to speaker and motor", guidance),
            localGuidance.flatMap { localGuidance in
                watch.map { Part("local guidance", LocalGuidanceService(guidance: localGuidance, watch: $0)) }
            },
            pairing.map { Part("pairing", $0) },
            gps.map { Part("GPS", GPSService(receiver: $0.receiver, track: $0.track, board: board, logger: logger)) },
            // Before the G-sensor: stopped after it, so an incident it saves while stopping is still kept for upload.
            clips.map { Part("event clips", $0) },
            incidents.map { Part("G-sensor incidents", $0) },
            parking.map { Part("parking", $0) },
            uplink.map { Part("uplink", UplinkService(uplink: $0, logger: logger)) },
            // Last, the first to be stopped. It alone ends the agent by ending (a run of N
            // segments, a failed encoder).
            Part("recording: camera to card and wire", recording, ends: .gracefullyShutdownGroup)
        ]
        self.init(parts: table.compactMap { $0 }, logger: logger)
    }
}
