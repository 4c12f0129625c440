public import Foundation
import GuidanceProtocol
public import HAL
public import Logging
import NIOPosix
public import ServiceLifecycle
import UTC

/// Where an event's evidence leaves for the owner: the G-sensor's incidents, a parked car's
/// clips and `protect` requests each become a ``ClipCustody/Entry`` (the evidence files on the
/// card, each with its size and SHA-256, the GPS track, the clock's state) that the uplink keeps
/// and uploads (``Uplink/upload(_:)``).
///
/// The parts that see an event only say so (``record(_:)`` never waits); this service hashes the
/// files and hands the clips over, one at a time. On a graceful shutdown what was recorded is
/// still handed over (kept on the card for the next start), without waiting for segments that
/// will not be written.
public struct EventClips: Service {
    public enum Event: Sendable {
        /// A saved incident: its window and protected files.
        case incident(id: String, at: Date, from: Date, to: Date, peakG: Double, paths: [String])
        /// A parked car's clip, as written.
        case parked(SegmentMetadata, SegmentNotes, path: String)
        /// A `protect` of a time range, asked at `requestedAt`.
        case protected(ClosedRange<Date>, requestedAt: Date)
        /// A `protect` of sequence numbers: the files it moved.
        case protectedFiles([String], requestedAt: Date)
    }

    let store: RecordingStore
    let uplink: Uplink
    let gps: GPSTrackStore?
    let board: StatusBoard
    let segmentSeconds: Int
    let logger: Logger
    private let events: AsyncStream<Event>
    private let sink: AsyncStream<Event>.Continuation
    private let stopping = StopFlag()

    public init(store: RecordingStore, uplink: Uplink, gps: GPSTrackStore?, board: StatusBoard, segmentSeconds: Int, logger: Logger) {
        self.store = store
        self.uplink = uplink
        self.gps = gps
        self.board = board
        self.segmentSeconds = segmentSeconds
        self.logger = logger
        (events, sink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(256))
    }

    /// An event to upload the evidence of; returns at once.
    public func record(_ event: Event) {
        if case .dropped = sink.yield(event) { logger.error("uplink: over 256 events wait to be described; the oldest is not uploaded") }
    }

    public func run() async {
        await withGracefulShutdownHandler {
            for await event in events {
                switch event {
                case .incident(let id, let at, let from, let to, let peakG, let paths):
                    await send(id: "incident-" + id, kind: "incident", at: at, from: from, to: to, peakG: peakG, paths: paths)
                case .parked(let metadata, let notes, let path):
                    await parked(metadata, notes, path: path)
                case .protected(let range, let requestedAt):
                    await protected(range, requestedAt: requestedAt)
                case .protectedFiles(let paths, let requestedAt):
                    let segments = paths.compactMap { StoredSegment(path: $0, bytes: 0) }.sorted { $0.capturedAt < $1.capturedAt }
                    guard let first = segments.first, let last = segments.last else { continue }
                    let to = last.capturedAt.addingTimeInterval(Double(segmentSeconds))
                    await send(
                        id: "protect-" + UTCTime(requestedAt).basic, kind: "protect", at: min(max(requestedAt, first.capturedAt), to),
                        from: first.capturedAt, to: to, paths: paths)
                }
            }
        } onGracefulShutdown: { [sink, stopping] in
            stopping.set()
            sink.finish()
        }
    }

    /// An event over `from…to`, triggered at `at`, shown by the segment files at `paths`
    /// (relative to the recording folder). The files are hashed off the cooperative pool.
    func send(id: String, kind: String, at: Date, from: Date, to: Date, peakG: Double? = nil, paths: [String]) async {
        let segments = paths.compactMap { StoredSegment(path: $0, bytes: 0) }
        let track = gps?.points(from: from, to: to) ?? []
        let clock = board.current.clock.flatMap { $0.synced.map { $0 ? "synced" : "unsynced" } }
        let made = try? await NIOThreadPool.singleton.runIfActive { [root = store.root] in
            ClipCustody.make(
                id: id, kind: kind, at: at, from: from, to: to, clock: clock, peakG: peakG,
                segments: segments, gps: track, root: root)
        }
        guard let entry = made ?? nil else {
            logger.warning("uplink: \(kind) \(id) has no file left on the card to upload")
            return
        }
        if let problem = entry.clip.problem(maxFileBytes: .max) {
            logger.error("uplink: \(kind) \(id) cannot be uploaded: \(problem)")
            return
        }
        await uplink.upload(entry)
    }

    /// A parked car's clip: one file, described by the metadata it was written with (its size,
    /// SHA-256, GPS track, clock and trigger), so nothing is read back from the card.
    func parked(_ metadata: SegmentMetadata, _ notes: SegmentNotes, path: String) async {
        guard let segment = StoredSegment(path: path, bytes: Int64(metadata.bytes)) else { return }
        let from = metadata.capturedAt
        let to = from.addingTimeInterval(Double(metadata.durationMs) / 1000)
        let offset = min(max(0, notes.parking?.triggerOffsetMs ?? 0), metadata.durationMs)
        let track = Array((notes.gps ?? []).suffix(ClientMessage.Clip.maxPositions))
        let clip = ClientMessage.Clip(
            id: "parking-" + segment.name.dropLast(4), kind: "parking", at: UTCTime(from.addingTimeInterval(Double(offset) / 1000)).rfc3339,
            from: UTCTime(from).rfc3339, to: UTCTime(to).rfc3339, clock: notes.clock?.synced.map { $0 ? "synced" : "unsynced" },
            triggerMs: offset, files: [.init(name: segment.name, bytes: metadata.bytes, sha256: metadata.sha256)],
            gps: track.isEmpty ? nil : track)
        if let problem = clip.problem(maxFileBytes: .max) {
            logger.error("uplink: parked clip \(path) cannot be uploaded: \(problem)")
            return
        }
        await uplink.upload(.init(clip: clip, paths: [segment.name: path]))
    }

    /// What a `protect` request kept, once the recording has written the segments it reaches
    /// into (up to ``IncidentService/finishWait``; not once stopping): the protected segments of `range`.
    func protected(_ range: ClosedRange<Date>, requestedAt: Date) async {
        await store.waitForSegments(
            until: range.upperBound, segmentSeconds: segmentSeconds, within: IncidentService.finishWait,
            while: { [stopping] in !stopping.value })
        let paths = store.segments(overlapping: range).filter(\.isProtected).map(\.path)
        let at = min(max(requestedAt, range.lowerBound), range.upperBound)
        await send(
            id: "protect-" + UTCTime(requestedAt).basic, kind: "protect", at: at, from: range.lowerBound, to: range.upperBound, paths: paths
        )
    }
}
