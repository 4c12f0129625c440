public import Foundation
import HAL
import Synchronization

/// The local recording: every segment under `<dir>/<UTC day>/`, written whole or not at all,
/// the oldest deleted to respect ``Retention``; segments kept for an incident under
/// `<dir>/protected/<UTC day>/`, which only their own cap (or a disk with no other segment left
/// to delete) removes.
///
/// One lock covers the index: the segment loop deletes and files segments, the control socket
/// protects, and neither sees the other's half-done work. A segment's write and its fsyncs happen
/// outside the lock, so a `protect` or a `status` never waits for the disk to take a segment. The
/// folder is listed once, at start; from then on the index in memory follows every write, move and
/// delete. Every method blocks on the disk: the agent calls them on a thread of the blocking pool,
/// never on Swift's cooperative pool.
public final class RecordingStore: Sendable {
    public let root: URL
    /// The nominal length of a segment, for matching files to a time range.
    public let segmentSeconds: Int
    /// Temporary files a power cut or a kill left behind, removed when the store was opened.
    public let removedLeftovers: [String]
    private let state: Mutex<State>
    /// What ``usage()`` answers, refreshed after every change: a status request never waits for
    /// a segment's fsync.
    private let counts: Mutex<Usage>

    public typealias Usage = (segments: Int, bytes: Int64, protectedSegments: Int, protectedBytes: Int64)

    private struct State {
        var retention: Retention
        /// Every segment in the folder, in the order they were recorded (``RecordingOrder``):
        /// what retention deletes first is first.
        var index: [StoredSegment]
        /// Time ranges of `protect` requests that reach past the newest segment written.
        var pending: [ClosedRange<Date>] = []
        /// Segments being written, by path: not in the index yet, but a `protect` that covers
        /// one asks for it (true), and it is moved into `protected/` as soon as it is whole.
        var writing: [String: Writing] = [:]
        /// The order segments were recorded in (``index`` follows it), kept on the disk.
        var order: RecordingOrder
    }

    private struct Writing {
        var seq: Int
        var capturedAt: Date
        var length: TimeInterval
        var protectRequested = false
    }

    /// What one segment did to the folder.
    public struct Recorded: Sendable {
        /// Relative to the folder; nil when the disk did not take it.
        public var path: String?
        public var error: OutputError?
        public var deleted: [StoredSegment]
    }

    /// Writes one segment file whole; a test holds it to show what does not wait for the disk.
    private let writeFile: @Sendable ([UInt8], URL) throws(OutputError) -> Void

    /// Opens the folder: creates it if needed, proves it takes a file, removes leftovers.
    public convenience init(directory: String, retention: Retention, segmentSeconds: Int) throws(OutputError) {
        try self.init(directory: directory, retention: retention, segmentSeconds: segmentSeconds) { bytes, file throws(OutputError) in
            try RecordingFiles.write(bytes, to: file)
        }
    }

    init(
        directory: String, retention: Retention, segmentSeconds: Int,
        writeFile: @escaping @Sendable ([UInt8], URL) throws(OutputError) -> Void
    ) throws(OutputError) {
        let root = URL(fileURLWithPath: directory, isDirectory: true)
        self.root = root
        self.segmentSeconds = segmentSeconds
        self.writeFile = writeFile
        try RecordingFiles.checkWritable(root)
        removedLeftovers = StoredSegment.folders(in: root).flatMap { folder in
            RecordingFiles.removeLeftovers(in: root.appendingPathComponent(folder)).map { folder.isEmpty ? $0 : folder + "/" + $0 }
        }
        var order = RecordingOrder(root: root)
        let index = order.sorted(StoredSegment.all(in: root))
        order.compact(keeping: index)
        state = Mutex(State(retention: retention, index: index, order: order))
        counts = Mutex(Self.usage(of: index))
    }

    public var retention: Retention {
        get { state.withLock { $0.retention } }
        set { state.withLock { $0.retention = newValue } }
    }

    /// Makes room, then writes the segment (into `protected/` if a pending `protect` covers it,
    /// or it is a parked car's clip).
    public func record(_ segment: Segment) -> Recorded {
        let start = segment.metadata.capturedAt
        // The time its slots cover from `capturedAt`, dropped frames included: a segment whose
        // first frames were dropped holds a shorter video (`durationMs`) but still covers its
        // slots' time, and a `protect` over its end keeps it.
        let slots = segment.metadata.frames + segment.metadata.droppedFrames
        let length = Double(slots) / Double(max(1, segment.metadata.fps))
        // Under the lock: what makes room for it, and where it goes.
        let (path, deleted) = state.withLock { state in
            defer { counts.withLock { $0 = Self.usage(of: state.index) } }
            state.pending.removeAll { $0.upperBound < start }
            // A parked car's clips are kept: that is what they were recorded for.
            let protected =
                segment.notes.parking != nil
                || state.pending.contains { SegmentSelection.overlaps($0, start: start, length: length) }
            let deleted = delete(
                state.retention.victims(
                    of: state.index, freeBytes: freeBytes(), incoming: Int64(segment.data.count), incomingProtected: protected),
                from: &state.index)
            let path = StoredSegment.path(for: segment.metadata, protected: protected)
            state.writing[path] = Writing(seq: segment.metadata.seq, capturedAt: start, length: length)
            // Logged before its file is there: a kill or a power cut after the rename cannot leave
            // the newest segment unlogged, and so first to go. A name whose file never came is
            // passed over.
            state.order.append(StoredSegment.fileName(for: segment.metadata))
            return (path, deleted)
        }
        // Outside it: the write, its flush and rename.
        let file = root.appendingPathComponent(path)
        var failure: OutputError?
        do throws(OutputError) {
            try RecordingFiles.makeFolder(file.deletingLastPathComponent())
            try writeFile(segment.data, file)
            // The GPS track beside it, once the MP4 is whole: a track never names a segment that
            // is not there. A track that cannot be written is logged by the caller's line, the
            // segment kept.
            if let gps = segment.notes.gps {
                let gpx = Self.sidecar(of: file)
                try? RecordingFiles.write(
                    Array(GPXFile.document(capturedAt: segment.metadata.capturedAt, track: gps, name: file.lastPathComponent).utf8), to: gpx
                )
            }
        } catch {
            failure = error
        }
        // Under the lock again: into the index, or into `protected/` first if a request came meanwhile.
        return state.withLock { state in
            defer { counts.withLock { $0 = Self.usage(of: state.index) } }
            let writing = state.writing.removeValue(forKey: path)
            if let failure { return Recorded(path: nil, error: failure, deleted: deleted) }
            var stored = StoredSegment(path: path, seq: segment.metadata.seq, capturedAt: start, bytes: Int64(segment.data.count))
            if writing?.protectRequested == true, !stored.isProtected {
                do throws(OutputError) {
                    stored = try moveToProtected(stored)
                } catch {
                    // It stays in the loop, whole; the request's reply already named it.
                    return Recorded(path: path, error: error, deleted: deleted)
                }
            }
            // The newest recorded, whatever the clock said of it (logged before it was written).
            state.index.append(stored)
            return Recorded(path: stored.path, error: nil, deleted: deleted)
        }
    }

    /// Moves a segment's file into `protected/<day>/`; returns it as it is now.
    private func moveToProtected(_ segment: StoredSegment) throws(OutputError) -> StoredSegment {
        let path = Self.protectedPath(of: segment)
        let destination = root.appendingPathComponent(path)
        try RecordingFiles.makeFolder(destination.deletingLastPathComponent())
        try RecordingFiles.move(root.appendingPathComponent(segment.path), to: destination)
        // Its GPS track follows it (a track left behind by a power cut is removed at the next start).
        let track = Self.sidecar(of: root.appendingPathComponent(segment.path))
        if FileManager.default.fileExists(atPath: track.path) { try? RecordingFiles.move(track, to: Self.sidecar(of: destination)) }
        removeFolderIfEmpty(of: segment.path)
        return StoredSegment(path: path, seq: segment.seq, capturedAt: segment.capturedAt, bytes: segment.bytes)
    }

    /// A segment's GPS track: `000042-….gpx` beside `000042-….mp4`.
    static func sidecar(of file: URL) -> URL {
        file.deletingPathExtension().appendingPathExtension(GPXFile.fileExtension)
    }

    private static func protectedPath(of segment: StoredSegment) -> String {
        [StoredSegment.protectedFolder, StoredSegment.dayFolder(for: segment.capturedAt), segment.name].joined(separator: "/")
    }

    /// What `protect` did.
    public struct Protection: Codable, Sendable, Equatable {
        /// Moved into `protected/` now, relative to the folder.
        public var protected: [String] = []
        public var alreadyProtected = 0
        /// Older protected segments deleted to stay under recording.protectedMaxMegabytes.
        public var deleted: [String] = []
        /// Selected segments left in the loop: recording.protectedMaxMegabytes cannot hold them
        /// along with the newer ones of the same request.
        public var overCap = 0
        /// Segments recorded until this time will be protected too (ms since 1970).
        public var pendingUntilMs: Int64?
        public var protectedSegments = 0
        public var protectedBytes: Int64 = 0
    }

    /// Moves the selected segments into `protected/`, then applies the protected cap to the
    /// segments protected before: a request never deletes what it keeps. When the request alone
    /// is more than the cap, its newest segments are kept and the oldest stay in the loop.
    public func protect(_ selection: SegmentSelection) throws(OutputError) -> Protection {
        try state.withLock { state throws(OutputError) in
            defer { counts.withLock { $0 = Self.usage(of: state.index) } }
            let stored = state.index
            var result = Protection()
            var chosen: [StoredSegment]
            switch selection {
            case .sequence(let range):
                // Newest first, so the first of each number is this run's.
                var seen = Set<Int>()
                chosen = stored.reversed().filter { range.contains($0.seq) && seen.insert($0.seq).inserted }
            case .time(let range):
                chosen = stored.filter { SegmentSelection.overlaps(range, start: $0.capturedAt, length: Double(segmentSeconds)) }
                // What the range reaches past the newest segment written is still to come: being
                // encoded, or not yet captured. However late the request is answered (a busy
                // device), or however far the encoder is behind the camera, it is kept as it is
                // written; a range that no segment reaches is dropped when the next one starts
                // past it.
                let newestEnd = stored.last.map { $0.capturedAt.addingTimeInterval(Double(segmentSeconds)) } ?? .distantPast
                if range.upperBound > newestEnd {
                    state.pending.append(range)
                    result.pendingUntilMs = SegmentSelection.ms(range.upperBound)
                }
            }
            // Newest first: what the cap cannot hold is the oldest of the request.
            chosen.sort { $0.capturedAt > $1.capturedAt }
            var budget = state.retention.protectedMaxBytes
            var kept: [StoredSegment] = []
            for segment in chosen {
                guard segment.bytes <= budget else {
                    if !segment.isProtected { result.overCap += 1 }
                    continue
                }
                budget -= segment.bytes
                kept.append(segment)
            }
            var protectedNow = Set<String>()
            for segment in kept.reversed() {
                if segment.isProtected {
                    result.alreadyProtected += 1
                    protectedNow.insert(segment.path)
                    continue
                }
                // A segment deleted by hand since the folder was read is no longer there to keep.
                guard FileManager.default.fileExists(atPath: root.appendingPathComponent(segment.path).path) else {
                    state.index.removeAll { $0.path == segment.path }
                    continue
                }
                let moved = try moveToProtected(segment)
                // In its place: protecting it does not change when it was recorded.
                if let place = state.index.firstIndex(where: { $0.path == segment.path }) { state.index[place] = moved }
                result.protected.append(moved.path)
                protectedNow.insert(moved.path)
            }
            // A segment being written when the request came is moved as soon as it is whole.
            for (path, writing) in state.writing where !writing.protectRequested && !path.hasPrefix(StoredSegment.protectedFolder + "/") {
                let covered =
                    switch selection {
                    case .sequence(let range): range.contains(writing.seq)
                    case .time(let range): SegmentSelection.overlaps(range, start: writing.capturedAt, length: writing.length)
                    }
                guard covered else { continue }
                state.writing[path]?.protectRequested = true
                result.protected.append(
                    Self.protectedPath(of: StoredSegment(path: path, seq: writing.seq, capturedAt: writing.capturedAt, bytes: 0)))
            }
            // The cap makes room among the segments protected before this request, oldest first.
            let earlier = state.index.filter { !protectedNow.contains($0.path) }
            let requestBytes = state.index.filter { protectedNow.contains($0.path) }.reduce(0) { $0 + $1.bytes }
            let capped = Retention(maxBytes: nil, protectedMaxBytes: state.retention.protectedMaxBytes, minFreeBytes: 0)
            let victims = capped.victims(of: earlier, freeBytes: nil, incoming: requestBytes, incomingProtected: true)
            result.deleted = delete(victims, from: &state.index).map(\.path)
            let usage = Self.usage(of: state.index)
            result.protectedSegments = usage.protectedSegments
            result.protectedBytes = usage.protectedBytes
            return result
        }
    }

    /// The segments in the folder whose time overlaps `range`, oldest first (protected or not).
    public func segments(overlapping range: ClosedRange<Date>) -> [StoredSegment] {
        state.withLock { state in
            state.index.filter { SegmentSelection.overlaps(range, start: $0.capturedAt, length: Double(segmentSeconds)) }
        }
    }

    /// Segments and bytes in the folder, protected ones apart.
    public func usage() -> Usage {
        counts.withLock { $0 }
    }

    private static func usage(of index: [StoredSegment]) -> Usage {
        let kept = index.filter(\.isProtected)
        let loop = index.filter { !$0.isProtected }
        return (loop.count, loop.reduce(0) { $0 + $1.bytes }, kept.count, kept.reduce(0) { $0 + $1.bytes })
    }

    /// Deletes the files and drops them from the index; returns those that were deleted. One
    /// already gone (removed by hand) leaves the index too; one that cannot be deleted stays.
    private func delete(_ victims: [StoredSegment], from index: inout [StoredSegment]) -> [StoredSegment] {
        var deleted: [StoredSegment] = []
        for segment in victims {
            // Never through a day folder swapped for a link since the folder was read. Its GPS
            // track first: a crash in between leaves a segment without its track, never a track
            // without its segment.
            _ = RecordingFiles.remove(String(segment.path.dropLast(4)) + "." + GPXFile.fileExtension, in: root)
            let result = RecordingFiles.remove(segment.path, in: root)
            let gone = result == 0
            if gone || result == ENOENT { index.removeAll { $0.path == segment.path } }
            guard gone else { continue }
            removeFolderIfEmpty(of: segment.path)
            deleted.append(segment)
        }
        return deleted
    }

    /// A day folder goes with its last segment (rmdir refuses a folder that still holds anything).
    private func removeFolderIfEmpty(of path: String) {
        let folder = (path as NSString).deletingLastPathComponent
        guard !folder.isEmpty else { return }
        if rmdir(root.appendingPathComponent(folder).path) == 0 {
            RecordingFiles.syncFolder(root.appendingPathComponent(folder).deletingLastPathComponent())
        }
    }

    /// Free bytes for an unprivileged writer on the folder's filesystem; nil if unknown.
    private func freeBytes() -> Int64? {
        var info = statvfs()
        guard statvfs(root.path, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }
}

extension RecordingStore {
    /// Until the recording has written the segment that holds `end`: a segment reaching past it
    /// is on the disk. On a busy board the recording may run seconds behind the clock, so the
    /// wait may be long (`within`); it ends early only if the task is cancelled (the recording stops).
    public func waitForSegments(until end: Date, segmentSeconds: Int, within: Duration, while going: @Sendable () -> Bool = { true }) async
    {
        let deadline = ContinuousClock.now + within
        while ContinuousClock.now < deadline, !Task.isCancelled, going() {
            let newest = segments(overlapping: end...end.addingTimeInterval(Double(segmentSeconds))).last
            if let newest, newest.capturedAt.addingTimeInterval(Double(segmentSeconds)) >= end { return }
            try? await Task.sleep(for: .milliseconds(250))
        }
    }
}
