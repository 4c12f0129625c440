public import Foundation
public import GuidanceProtocol
public import HAL
import Synchronization
import UTC

/// What `dashcam-agent status` prints: the running agent's live state.
public struct AgentStatus: Codable, Sendable, Equatable {
    public struct Camera: Codable, Sendable, Equatable {
        public var source: String
        public var format: String
        public var fps: Int
        /// `recording` or `lost`.
        public var state: String
        public var segments = 0
        public var droppedFrames = 0
    }

    public struct UplinkStatus: Codable, Sendable, Equatable {
        /// `off` (no uplink.url), `connecting`, `connected`, `disconnected`, `authentication failed`,
        /// `no token`, `stopped`.
        public var state = "off"
        /// What keeps the uplink from a session, when the agent knows (`no token`: which file and why).
        public var problem: String?
        public var server: String?
        public var session: String?
        public var sessionAgeSeconds: Int?
        public var sent = 0
        public var acked = 0
        public var dropped = 0
        public var reconnects = 0
        public var paused = false
        /// Segments recorded that the server has not acknowledged (dropped, queued, in flight, or
        /// recorded while offline): they are only in the recording folder.
        public var notSent = 0
        /// While pairing: the code to type on the owner's page (`123 456 789`).
        public var pairingCode: String?
        /// A paired car: its device id and the account it joined.
        public var pairedDevice: String?
        public var pairedOwner: String?
    }

    public struct RecordingStatus: Codable, Sendable, Equatable {
        public var dir: String
        public var segments = 0
        public var bytes: Int64 = 0
        /// Kept with `dashcam-agent protect`, under `protected/`.
        public var protectedSegments = 0
        public var protectedBytes: Int64 = 0
        /// Sequence number of the newest segment written, for `protect`.
        public var lastSeq: Int?
        /// Segments the disk did not take (full or failing); they were still streamed.
        public var failedWrites = 0
        /// Segments lost before the disk: it and the uplink fell `CapturePipeline.bufferedSegments` behind.
        public var droppedSegments = 0
    }

    public struct Guidance: Codable, Sendable, Equatable {
        public var seq: Int
        public var text: String
        public var lang: String?
        public var clear: Bool
        public var priority: String
        public var receivedAt: String
    }

    public struct Speech: Codable, Sendable, Equatable {
        public var output: String
        public var locale: String
        public var spoken = 0
        public var cutOff = 0
        public var replaced = 0
        public var failures = 0
    }

    public struct HapticsStatus: Codable, Sendable, Equatable {
        public var line: String
        public var released: Bool
    }

    /// Local guidance (``LocalGuidance.StateMachine``): the device's own checks while no server guides.
    public struct LocalGuidance: Codable, Sendable, Equatable {
        public struct Finding: Codable, Sendable, Equatable {
            /// A ``RoadScene/RoadFinding`` raw value: `too_dark`, `pedestrian_close`, ….
            public var finding: String
            public var at: String
        }

        /// `offline.enabled`.
        public var enabled: Bool
        /// `off` (switched off), `standby` (the server guides), `on` (the device guides).
        public var state: String
        /// Why it is on: `no session`, `usage exhausted` or `guidance unavailable`.
        public var reason: String?
        public var since: String?
        public var looked = 0
        public var skipped = 0
        /// Warnings spoken.
        public var spoken = 0
        /// The last look's time, in ms.
        public var lastLookMs: Double?
        public var lastFinding: Finding?

        public init(enabled: Bool) {
            self.enabled = enabled
            state = enabled ? "standby" : "off"
        }
    }

    /// The wall clock (``ClockRules``).
    public struct Clock: Codable, Sendable, Equatable {
        public var synced: Bool?
        /// `gps`, `ntp`, `none`, `unknown`.
        public var source: String
        /// Steps seen since the agent started, and the last one in seconds (negative: back).
        public var steps: Int
        public var lastStepSeconds: Double?
    }

    /// The GPS (gpsd) and its last fix.
    public struct GPS: Codable, Sendable, Equatable {
        public struct Fix: Codable, Sendable, Equatable {
            /// `no fix`, `2d`, `3d`, `unknown`.
            public var mode: String
            /// The receiver's time of the fix.
            public var time: String?
            public var lat: Double?
            public var lon: Double?
            public var speedKmh: Double?
            public var heading: Double?
            /// When it came, by the agent's clock (RFC 3339).
            public var receivedAt: String

            public init(_ fix: GPSFix, at: Date) {
                mode = fix.modeName
                time = fix.time.map { UTCTime($0).rfc3339 }
                lat = fix.hasPosition ? fix.lat : nil
                lon = fix.hasPosition ? fix.lon : nil
                speedKmh = fix.speed.map { ($0 * 3.6 * 10).rounded() / 10 }
                heading = fix.track.map { ($0 * 10).rounded() / 10 }
                receivedAt = UTCTime(at).rfc3339
            }
        }

        /// `host:port` of gpsd.
        public var gpsd: String
        /// `connecting`, `connected`, `disconnected`.
        public var state: String
        public var problem: String?
        /// The last fix, while it is at most ``GPSTrack/stale`` seconds old.
        public var fix: Fix?
    }

    /// The G-sensor and the incidents it saved.
    public struct Incidents: Codable, Sendable, Equatable {
        public struct Incident: Codable, Sendable, Equatable {
            /// The car's name for it (also the server's): the first impact's time, basic ISO 8601.
            public var id: String
            /// The first impact, RFC 3339.
            public var at: String
            public var peakG: Double
            public var impacts: Int
            /// The window kept, RFC 3339.
            public var from: String
            public var to: String
            /// `open` while impacts may still extend it, then `saved`.
            public var state: String
            /// The protected segment files, relative to the recording folder.
            public var files: [String]
        }

        /// `lis3dh (iio:device0)`; nil until it has been opened.
        public var sensor: String?
        public var sensitivity: String
        /// `watching`, `no sensor` (none configured), or `failing` (see `problem`).
        public var state: String
        public var problem: String?
        /// Readings per second asked for.
        public var hz: Int
        /// Newest first, at most ``IncidentService/listed``.
        public var list: [Incident] = []
    }

    /// Parking mode: the ignition, the mode, the clips saved.
    public struct Parking: Codable, Sendable, Equatable {
        /// The ignition input, as found.
        public var input: String
        /// `on`, `off`, or nil until its level has held for the debounce time.
        public var ignition: String?
        /// `driving` or `parked`.
        public var mode = "driving"
        public var sensitivity: String
        /// Clips saved in the current parking.
        public var events = 0
        /// Clips saved since the agent started.
        public var eventsTotal = 0
        /// The last clip saved, relative to the recording folder.
        public var lastClip: String?
        /// Frames the parked watch has looked at since the agent started.
        public var framesWatched = 0
        public var problem: String?
    }

    /// One stream's encoder and what it has made since the agent started.
    public struct StreamStatus: Codable, Sendable, Equatable {
        public var encoder: String
        /// `1920x1080@30`.
        public var format: String
        public var codec: String?
        public var segments = 0
        public var bytes: Int64 = 0
        /// Seconds of video those segments hold.
        public var seconds = 0.0

        /// What an hour of this stream takes, from what it made so far; nil before a segment.
        public var megabytesPerHour: Double? {
            seconds > 0 ? Double(bytes) / 1_048_576 * 3600 / seconds : nil
        }

        mutating func add(_ segment: SegmentMetadata) {
            segments += 1
            bytes += Int64(segment.bytes)
            seconds += Double(segment.durationMs) / 1000
            codec = segment.codec?.rawValue ?? codec
        }
    }

    /// The evidence recorded and the guidance copy sent (`uplink.video`); nil with one stream.
    public struct Streams: Codable, Sendable, Equatable {
        public var evidence: StreamStatus
        public var guidance: StreamStatus
        /// Hours of evidence the recording folder holds at this rate (its cap, or its disk's share).
        public var recordingHours: Double?
    }

    /// Clips the car owes its owner's server (``ClipUploads``).
    public struct Uploads: Codable, Sendable, Equatable {
        public struct Clip: Codable, Sendable, Equatable {
            public var id: String
            public var kind: String
            public var at: String
            /// Bytes the server is not known to hold yet.
            public var bytesLeft: Int
        }

        /// Oldest first.
        public var waiting: [Clip] = []
        /// Why no part goes now: `nothing` (uploading), `session`, `segments`, `answer`, `budget`, `wifi`.
        public var waitingFor: String
        /// `always` or `wifi` (`upload.when`).
        public var when: String
        /// Bytes of clips sent today, and the day's limit (`upload.dailyMegabytes`; nil: none).
        public var bytesToday = 0
        public var dailyBytes: Int?
        /// Clips the server confirmed since the agent started.
        public var stored = 0
    }

    public var camera: Camera
    public var encoder: String
    /// With two streams: each one's encoder, size, and data per hour.
    public var streams: Streams?
    public var uplink = UplinkStatus()
    /// Nil for a status without a local recording.
    public var recording: RecordingStatus?
    /// Seconds of guidance left; nil when unlimited or not known yet (``usageKnown``).
    public var remainingSeconds: Int?
    /// A welcome or usage message has told the remaining usage.
    public var usageKnown = false
    public var lastGuidance: Guidance?
    /// Nil in a status made without local guidance (an agent that never built it).
    public var localGuidance: LocalGuidance?
    public var speech: Speech
    public var haptics: HapticsStatus
    /// Nil in a status made without the G-sensor's part (an agent that never built it).
    public var incidents: Incidents?
    /// Nil without `sensors.gps.gpsd`.
    public var gps: GPS?
    /// Nil until the clock's service has looked.
    public var clock: Clock?
    /// Nil without `parking.ignition.line`.
    public var parking: Parking?
    /// Nil without an uplink.
    public var uploads: Uploads?

    /// Lines for people; `--json` prints the JSON instead.
    public var text: String {
        var lines = [
            "camera: \(camera.source), \(camera.format) at \(camera.fps) fps, \(camera.state); \(camera.segments) segments, \(camera.droppedFrames) frames dropped",
            "encoder: \(encoder)"
        ]
        if let streams {
            for (name, stream) in [("evidence", streams.evidence), ("guidance", streams.guidance)] {
                var line = "\(name): \(stream.encoder) (\(stream.codec ?? "?")) at \(stream.format); \(stream.segments) segments"
                if let rate = stream.megabytesPerHour {
                    line += String(format: ", %.0f MB an hour (%.0f kbit/s)", rate, rate * 1_048_576 * 8 / 3600 / 1000)
                }
                if name == "evidence", let hours = streams.recordingHours {
                    line += String(format: "; the recording folder holds %.1f hours", hours)
                }
                lines.append(line)
            }
        }
        var link = "uplink: \(uplink.state)"
        if let server = uplink.server { link += " to \(server)" }
        if let session = uplink.session, let age = uplink.sessionAgeSeconds { link += ", session \(session) for \(age) s" }
        link += "; sent \(uplink.sent), acked \(uplink.acked), dropped \(uplink.dropped), reconnects \(uplink.reconnects)"
        if uplink.state != "off" { link += "; \(uplink.notSent) segments only on disk" }
        if uplink.paused { link += "; uploads paused (usage exhausted)" }
        if let problem = uplink.problem { link += "; \(problem)" }
        if let code = uplink.pairingCode { link += "; pairing: enter the code \(code) on the server's page" }
        if let device = uplink.pairedDevice { link += "; paired as \(device) with the account of \(uplink.pairedOwner ?? "?")" }
        lines.append(link)
        if let recording {
            var line =
                "recording: \(recording.dir); \(recording.segments) segments (\(Self.megabytes(recording.bytes))), "
                + "\(recording.protectedSegments) protected (\(Self.megabytes(recording.protectedBytes)))"
            if let seq = recording.lastSeq { line += "; newest segment \(seq)" }
            if recording.failedWrites > 0 { line += "; \(recording.failedWrites) segments the disk did not take" }
            lines.append(line)
        }
        lines.append(
            "usage: " + (!usageKnown ? "not known yet" : remainingSeconds.map { "\($0 / 60) min \($0 % 60) s left" } ?? "unlimited"))
        if let last = lastGuidance {
            lines.append(
                "last guidance: segment \(last.seq) at \(last.receivedAt): " + (last.clear ? "clear" : "[\(last.priority)] \(last.text)"))
        } else {
            lines.append("last guidance: none yet")
        }
        if let localGuidance {
            var line = "local guidance: \(localGuidance.state)"
            if let reason = localGuidance.reason, let since = localGuidance.since { line += " (\(reason)) since \(since)" }
            line += "; looked at \(localGuidance.looked) frames, skipped \(localGuidance.skipped), spoke \(localGuidance.spoken) warnings"
            if let ms = localGuidance.lastLookMs { line += String(format: "; last look %.0f ms", ms) }
            if let last = localGuidance.lastFinding { line += "; last finding: \(last.finding) at \(last.at)" }
            lines.append(line)
        }
        if let clock {
            var line =
                "clock: "
                + (clock.synced == true ? "synchronised (\(clock.source))" : clock.synced == false ? "not synchronised" : "unknown")
            if clock.steps > 0, let last = clock.lastStepSeconds {
                line += String(format: "; %d step(s), the last %+.3f s", clock.steps, last)
            }
            lines.append(line)
        }
        if let gps {
            var line = "gps: gpsd at \(gps.gpsd), \(gps.state)"
            if let problem = gps.problem { line += " (\(problem))" }
            if let fix = gps.fix {
                line += "; \(fix.mode)"
                if let lat = fix.lat, let lon = fix.lon { line += String(format: " at %.5f, %.5f", lat, lon) }
                if let speed = fix.speedKmh { line += String(format: ", %.0f km/h", speed) }
                if let heading = fix.heading { line += String(format: ", heading %.0f°", heading) }
            } else if gps.state == "connected" {
                line += "; no fix"
            }
            lines.append(line)
        }
        if let parking {
            var line =
                "parking: \(parking.mode), ignition \(parking.ignition ?? "unknown") (\(parking.input)), sensitivity \(parking.sensitivity); \(parking.events) event(s) this parking, \(parking.eventsTotal) in all"
            if let problem = parking.problem { line += "; \(problem)" }
            lines.append(line)
        }
        if let incidents {
            var line = "g-sensor: \(incidents.sensor ?? "-"), \(incidents.state), sensitivity \(incidents.sensitivity)"
            if let problem = incidents.problem { line += "; \(problem)" }
            line += "; \(incidents.list.count) incident(s)"
            lines.append(line)
            for incident in incidents.list {
                lines.append(
                    String(
                        format: "  incident %@: %.2f g, %d impact(s), %@ to %@, %@; %d file(s)", incident.at, incident.peakG,
                        incident.impacts, incident.from, incident.to, incident.state, incident.files.count))
            }
        }
        if let uploads {
            var line =
                "uploads: \(uploads.waiting.count) clip(s) waiting (\(Self.megabytes(Int64(uploads.waiting.reduce(0) { $0 + $1.bytesLeft }))))"
            if !uploads.waiting.isEmpty {
                line += ", " + (uploads.waitingFor == "nothing" ? "uploading" : "waiting for \(uploads.waitingFor)")
            }
            line += "; \(Self.megabytes(Int64(uploads.bytesToday))) today"
            if let limit = uploads.dailyBytes { line += " of \(Self.megabytes(Int64(limit)))" }
            line += "; when: \(uploads.when); \(uploads.stored) stored since start"
            lines.append(line)
            for clip in uploads.waiting {
                lines.append("  clip \(clip.id) (\(clip.kind)) at \(clip.at): \(Self.megabytes(Int64(clip.bytesLeft))) to send")
            }
        }
        lines.append(
            "speech: \(speech.output), \(speech.locale); spoken \(speech.spoken), cut off \(speech.cutOff), replaced \(speech.replaced), failed \(speech.failures)"
        )
        lines.append("haptics: \(haptics.line)" + (haptics.released ? " (released)" : ""))
        return lines.joined(separator: "\n")
    }

    /// `812 KB`, `3.4 MB`, `2.1 GB`.
    static func megabytes(_ bytes: Int64) -> String {
        let units = [("GB", 1 << 30), ("MB", 1 << 20)]
        for (unit, size) in units where bytes >= Int64(size) { return String(format: "%.1f %@", Double(bytes) / Double(size), unit) }
        return "\((bytes + 1023) / 1024) KB"
    }
}

/// The parts of ``AgentStatus`` only the record loop knows, kept as they change.
public final class StatusBoard: Sendable {
    private let state: Mutex<AgentStatus>

    public init(_ initial: AgentStatus) {
        state = Mutex(initial)
    }

    public func update(_ change: (inout AgentStatus) -> Void) {
        state.withLock { change(&$0) }
    }

    public var current: AgentStatus { state.withLock { $0 } }

    /// A segment closed; `written`: the recording folder took it.
    /// A guidance copy's segment went to the uplink (two streams).
    public func streamed(_ segment: SegmentMetadata) {
        update { $0.streams?.guidance.add(segment) }
    }

    /// An evidence segment, with what the folder holds at the rate so far (`capBytes`: its cap).
    public func recorded(_ segment: SegmentMetadata, written: Bool = true, capBytes: Int64? = nil) {
        update {
            if $0.streams != nil {
                $0.streams?.evidence.add(segment)
                if let cap = capBytes, let rate = $0.streams?.evidence.megabytesPerHour, rate > 0 {
                    $0.streams?.recordingHours = Double(cap) / 1_048_576 / rate
                }
            }
            $0.camera.segments += 1
            $0.camera.droppedFrames += segment.droppedFrames
            if written {
                $0.recording?.lastSeq = segment.seq
            } else {
                $0.recording?.failedWrites += 1
            }
        }
    }

    public func camera(_ event: CameraEvent) {
        update { $0.camera.state = event == .back ? "recording" : "lost" }
    }

    public func received(_ message: ServerMessage, at date: Date = Date()) {
        update { status in
            switch message {
            case .welcome(_, let remaining):
                status.remainingSeconds = remaining
                status.usageKnown = true
            case .usage(let remaining):
                status.remainingSeconds = remaining
                status.usageKnown = true
            case .guidance(let guidance):
                status.lastGuidance = .init(
                    seq: guidance.seq, text: guidance.text, lang: guidance.lang, clear: guidance.clear,
                    priority: guidance.priority.rawValue, receivedAt: date.rfc3339Milliseconds)
            default: break
            }
        }
    }
}
