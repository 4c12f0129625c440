import ArgumentParser
import ConfigSupport
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

    func run() async throws {
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
        let logger = Logger(label: "dashcam-agent")
        // Trapped before anything starts: SIGHUP's default would end the agent.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let store = try RecordingStore(
            directory: config.recording.dir, retention: config.retention, segmentSeconds: config.encoder.segmentSeconds)
        if !store.removedLeftovers.isEmpty {
            logger.notice("recording: removed \(store.removedLeftovers.count) temporary file(s) an interrupted run left in \(config.recording.dir)")
        }
        let pipeline = try CapturePipeline(
            source: config.makeSource(logger: logger), settings: config.pipelineSettings(maxSegments: segments),
            logger: logger)

        let uplink = try config.makeUplink(logger: logger)
        let haptics = try config.makeHaptics(logger: logger)
        defer { haptics.close() }
        let patterns = try config.hapticPatterns()
        let voice = config.makeVoice(logger: logger)
        defer { voice.close() }
        let announcer = StatusAnnouncer { phrases in voice.announce(phrases) }
        let board = StatusBoard(AgentStatus(
            camera: .init(source: pipeline.cameraName, format: pipeline.cameraFormat, fps: config.camera.fps, state: "recording"),
            encoder: pipeline.encoderName, speech: .init(output: voice.output, locale: voice.deviceLocale),
            haptics: .init(line: haptics.lineDescription, released: false)))
        board.update { $0.recording = .init(dir: config.recording.dir) }
        let router = GuidanceRouter(voice: voice, haptics: haptics, clear: patterns.clear, alert: patterns.alert,
                                    announcer: announcer, board: board, logger: logger)
        let control = ControlRequests(board: board, store: store, uplink: uplink, server: config.uplink.url, voice: voice, haptics: haptics)

        let reloader = ConfigReloader(running: config, logger: logger) { [file = self.config] in
            try await AgentConfig.load(file: file, overrides: overrides)
        } apply: { new in
            let patterns = try new.hapticPatterns()
            router.patterns.current = patterns
            store.retention = new.retention
            logLevel.current = new.log.level
        }

        let notifier = SystemdNotifier()
        let heartbeat = ServiceHeartbeat(
            health: pipeline.health, notifier: notifier,
            segmentDeadline: .seconds(config.encoder.segmentSeconds * 2 + 5),
            frameDeadline: .milliseconds(config.camera.pollTimeoutMs * config.camera.stallTimeouts + 1000),
            watchdogMicroseconds: ProcessInfo.processInfo.environment["WATCHDOG_USEC"],
            readyStatus: "recording \(pipeline.cameraName) with \(pipeline.encoderName)")

        // SIGTERM (systemd stopping the service) and SIGINT end the recording gracefully: the
        // segment in progress is closed and written, the session closed with 1001, the line released.
        let stopRequested = StopFlag()
        let recording = RecordingService(stop: {
            stopRequested.set()
            notifier.stopping()
            pipeline.stop()
        }) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                if notifier.isActive { group.addTask { await heartbeat.run() } }
                group.addTask {
                    var reloader = reloader
                    for await _ in hangups { await reloader.reload() }
                }
                group.addTask { await StatusSocket.serve(path: config.status.socket, logger: logger, answer: control.answer) }
                group.addTask {
                    for await event in pipeline.events {
                        board.camera(event)
                        await announcer.camera(event)
                    }
                }
                let (routed, routerDone) = AsyncStream.makeStream(of: Void.self)
                if let uplink {
                    let changes = networkChanges(logger: logger)
                    group.addTask { await uplink.run(networkChanges: changes) }
                    // One guidance message from the wire to the speaker and the motor.
                    group.addTask {
                        for await message in uplink.messages { await router.route(message, receivedAt: .now) }
                        routerDone.finish()
                    }
                    group.addTask { for await state in uplink.states { await announcer.uplink(state) } }
                } else {
                    routerDone.finish()
                }
                pipeline.start()
                await announcer.started()
                // One frame from the camera to the wire: capture → encoder → segment → uplink, and disk.
                var diskTrouble = DiskTrouble()
                for try await segment in pipeline.segments {
                    // The network does not wait for the disk (the file is flushed before its rename).
                    await uplink?.enqueue(segment)
                    // The oldest go first; a full or failing disk never stops the recording or
                    // the stream: the segment is still sent, and its line says it has no file.
                    let recorded = store.record(segment)
                    if let oldest = recorded.deleted.first {
                        logger.info("recording: deleted \(recorded.deleted.count) oldest segment(s) to make room", metadata: ["oldest": "\(oldest.path)"])
                    }
                    if let error = recorded.error { diskTrouble.report(error, logger: logger) }
                    // One line per segment, written at once: a reader sees each as soon as it is on disk.
                    FileHandle.standardOutput.write(Data((try segment.metadata.jsonLine(file: recorded.path) + "\n").utf8))
                    board.recorded(segment.metadata, written: recorded.path != nil)
                }
                if let uplink {
                    // The last segment is sent and its ack and guidance awaited (uplink.drainMs).
                    await uplink.shutdown()
                    for await _ in routed {}
                    let stats = await uplink.stats
                    logger.notice("uplink: sent \(stats.sent), acked \(stats.acked), re-sent \(stats.resent), dropped \(stats.dropped), stale guidance \(stats.staleGuidance), sessions \(stats.sessions)")
                    // A run of N segments ends once its last guidance has been spoken (bounded);
                    // a service that is told to stop does not wait for speech.
                    if segments != nil, !stopRequested.value {
                        await withTaskGroup(of: Void.self) { speaking in
                            speaking.addTask { await voice.waitUntilIdle() }
                            speaking.addTask { try? await Task.sleep(for: .seconds(15)) }
                            _ = await speaking.next()
                            voice.close()  // idle already, or past the bound: cut off (which ends the wait)
                            speaking.cancelAll()
                        }
                    }
                }
                group.cancelAll()
            }
        }
        try await ServiceGroup(configuration: .init(
            services: [.init(service: recording, successTerminationBehavior: .gracefullyShutdownGroup,
                             failureTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// Changes of the default route or its addresses, which make the uplink open a new session.
    private func networkChanges(logger: Logger) -> AsyncStream<NetworkChange> {
        do {
            return try RTNetlinkMonitor(logger: logger).changes()
        } catch {
            logger.warning("uplink: \(error); network changes will not trigger a new session")
            return AsyncStream { $0.finish() }
        }
    }

    /// Flags that override config keys (CLI > environment > file > defaults).
    private func overrides() throws -> [String: String] {
        var values: [String: String] = [:]
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
private final class StopFlag: Sendable {
    private let flag = Mutex(false)
    func set() { flag.withLock { $0 = true } }
    var value: Bool { flag.withLock { $0 } }
}

/// Segment files that could not be written: every failure counted, logged at most once a minute.
private struct DiskTrouble {
    var failures = 0
    var lastLog: ContinuousClock.Instant?

    mutating func report(_ error: any Error, logger: Logger) {
        failures += 1
        let now = ContinuousClock.now
        if let lastLog, now - lastLog < .seconds(60) { return }
        lastLog = now
        logger.error("recording: \(error); recording and streaming go on without the file", metadata: ["failedWrites": "\(failures)"])
    }
}

/// The recording as a service of swift-service-lifecycle: a graceful shutdown asks the pipeline
/// to stop, and `run` returns once everything after it has been closed in order.
private struct RecordingService: Service {
    let stop: @Sendable () -> Void
    let body: @Sendable () async throws -> Void

    func run() async throws {
        try await withGracefulShutdownHandler(operation: body, onGracefulShutdown: stop)
    }
}

extension Array where Element == String {
    fileprivate var pair: (String, String?) { (self.first ?? "", self.count > 1 ? self[1] : nil) }
}
