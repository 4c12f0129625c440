import Foundation
import GuidanceProtocol
import HAL
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// The pipeline and the recording store: one frame from the camera to the wire and the disk.
///
/// capture → encoder → segment (``CapturePipeline``, on its own thread) → the uplink's custody,
/// then the disk (``RecordingStore``, on a thread of the blocking pool) → one JSON line on stdout.
/// With two streams the guidance copy's segment goes to the uplink and the evidence segment to the
/// disk, each with its own line (naming its partner).
/// A graceful shutdown asks the pipeline to close the segment in progress; `run` returns once that
/// last segment is handed to the uplink and written.
struct RecordingService: Service {
    let pipeline: CapturePipeline
    let store: RecordingStore
    let uplink: Uplink?
    let board: StatusBoard
    let logger: Logger
    /// Once the pipeline runs (the announcer says so).
    let started: @Sendable () async -> Void
    /// When a stop is asked for, before the pipeline is told (systemd hears `STOPPING=1`).
    let stopping: @Sendable () -> Void
    /// A parked car's clip was written (its path, relative to the folder).
    var clipSaved: (@Sendable (String) -> Void)? = nil
    /// ... and goes to the owner.
    var clips: EventClips? = nil

    func run() async throws {
        try await withGracefulShutdownHandler {
            pipeline.start()
            await started()
            var diskTrouble = DiskTrouble()
            for try await segment in pipeline.segments {
                // Two streams: the guidance copy goes to the uplink only, held in its custody until
                // the server acknowledges it; the evidence goes to the disk only.
                if segment.metadata.stream == .guidance {
                    await uplink?.enqueue(segment)
                    FileHandle.standardOutput.write(Data((try segment.jsonLine() + "\n").utf8))
                    board.streamed(segment.metadata)
                    continue
                }
                // The network does not wait for the disk (the file is flushed before its rename).
                // A parked car's clips are kept, not streamed: the uplink is parked too.
                if segment.notes.parking == nil, segment.metadata.stream == nil { await uplink?.enqueue(segment) }
                // The oldest go first; a full or failing disk never stops the recording or the
                // stream: the segment is still sent, and its line says it has no file.
                let recorded = await write(segment)
                if let oldest = recorded.deleted.first {
                    logger.info(
                        "recording: deleted \(recorded.deleted.count) oldest segment(s) to make room",
                        metadata: ["oldest": "\(oldest.path)"])
                }
                if let error = recorded.error { diskTrouble.report(error, logger: logger) }
                // One line per segment, written at once: a reader sees each as soon as it is on disk.
                FileHandle.standardOutput.write(Data((try segment.jsonLine(file: recorded.path) + "\n").utf8))
                board.recorded(segment.metadata, written: recorded.path != nil, capBytes: store.retention.maxBytes)
                if segment.notes.parking != nil, let path = recorded.path {
                    clipSaved?(path)
                    clips?.record(.parked(segment.metadata, segment.notes, path: path))
                }
                board.update { $0.recording?.droppedSegments = pipeline.droppedSegments }
            }
        } onGracefulShutdown: { [pipeline, stopping] in
            stopping()
            pipeline.stop()
        }
    }

    /// The store blocks on the disk (write, fsync, rename, deletes): not on the cooperative pool.
    /// A segment handed over is written even if the task is cancelled meanwhile (a future's
    /// `get` does not give up as the async `runIfActive` would).
    private func write(_ segment: Segment) async -> RecordingStore.Recorded {
        do {
            return try await NIOThreadPool.singleton.runIfActive(eventLoop: MultiThreadedEventLoopGroup.singleton.any()) { [store] in
                store.record(segment)
            }.get()
        } catch {
            return .init(path: nil, error: OutputError(path: store.root.path, reason: "\(error)"), deleted: [])
        }
    }
}

/// Segment files that could not be written: every failure counted, logged at most once a minute.
private struct DiskTrouble {
    var failures = 0
    var log = RateLimit(interval: .seconds(60))

    mutating func report(_ error: any Error, logger: Logger) {
        failures += 1
        guard log.allows(now: MonotonicClock.now()) else { return }
        logger.error("recording: \(error); recording and streaming go on without the file", metadata: ["failedWrites": "\(failures)"])
    }
}
