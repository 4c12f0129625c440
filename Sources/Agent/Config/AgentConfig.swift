public import ConfigSupport
import Foundation
import HAL
public import Logging

/// Everything the agent reads from configuration.
///
/// `AgentConfig()` is the built-in defaults. They are written only here: the key table
/// (`AgentConfig.keys`) and the README quote them from an instance, so they can't disagree.
/// Build a real one with `AgentConfig.load(file:environment:overrides:)` (from `LoadableConfig`).
public struct AgentConfig: LoadableConfig {
    public var device = Device()
    public var camera = Camera()
    public var encoder = Encoding()
    public var recording = Recording()
    public var uplink = UplinkSettings()
    public var guidance = Guidance()
    public var offline = Offline()
    public var speech = Speech()
    public var haptics = HapticsSettings()
    public var sensors = Sensors()
    public var incident = Incident()
    public var parking = Parking()
    public var upload = Upload()
    public var status = Status()
    public var log = Log()

    public init() {}

    public struct Device: Sendable, Equatable {
        /// The device's one language (BCP 47): `hello`, guidance without `lang`, status phrases.
        /// Unset: `LC_ALL`, `LC_MESSAGES` or `LANG`, else `en-US` (``AgentConfig/deviceLocale(environment:)``).
        public var locale: String?

        public init() {}
    }

    public struct Camera: Sendable, Equatable {
        public var source: SourceKind = .v4l2
        public var device = "/dev/video0"
        /// Required when `source` is `.file`; `validate()` enforces that.
        public var file: String?
        public var width = 640
        public var height = 360
        public var fps = 10
        public var pixelFormat: CapturePixelFormat = .auto
        public var buffers = 4
        public var pollTimeoutMs = 1000
        /// Poll timeouts in a row after which the camera counts as stalled.
        public var stallTimeouts = 3
        public var reopenBackoffMs = 250...2000
        public var pace: Pace = .realtime

        public init() {}
    }

    // Not `Encoder`: that would shadow Swift.Encoder inside AgentConfig.
    public struct Encoding: Sendable, Equatable {
        /// Hardware first, then software; with one stream only the HEVC ones are tried (it goes to the server).
        public var preference = [
            "hevc_v4l2m2m", "h264_v4l2m2m", "hevc_vaapi", "h264_vaapi", "hevc_nvenc", "h264_nvenc", "libx264", "libx265"
        ]
        public var rateControl: RateControlMode = .crf
        public var crf = 28
        public var bitrateKbps = 1000
        public var maxrateKbps: Int?
        public var bufsizeKbps: Int?
        public var segmentSeconds = 5

        public init() {}

        /// VBV ceiling for `.bitrate`: unset means the target bitrate, so peaks can't exceed it.
        public var effectiveMaxrateKbps: Int { maxrateKbps ?? bitrateKbps }
        /// VBV buffer for `.bitrate`: unset means two seconds' worth at the target bitrate.
        public var effectiveBufsizeKbps: Int { bufsizeKbps ?? 2 * bitrateKbps }
    }

    public struct Recording: Sendable, Equatable {
        public var dir = "/var/lib/dashcam-agent/recordings"
        /// Unset: no cap; the oldest segments go when the free space runs low.
        public var maxMegabytes: Int?
        public var protectedMaxMegabytes = 2048
        public var minFreeMegabytes = 256

        public init() {}
    }

    public struct UplinkSettings: Sendable, Equatable {
        /// `wss://HOST[:PORT]/v1/stream`; unset means record only.
        public var url: String?
        public var tokenFile = "/etc/dashcam-agent/token"
        /// Where a paired car keeps its credentials.
        public var credentialsFile = "/var/lib/dashcam-agent/credentials.json"
        /// Pair by a spoken code when there is neither a token file nor credentials.
        public var pairing = true
        public var caFile: String?
        public var allowInsecure = false
        public var deviceId = "dashcam"
        /// Deprecated: an old name of ``Device/locale``.
        public var locale: String?
        public var payload: Payload = .chunks
        public var pingSeconds = Int(Uplink.StateMachine.Settings.standard.ping.components.seconds)
        public var reconnectBackoffMs =
            Uplink.StateMachine.Settings.standard.backoff.base
            .wholeMilliseconds...Uplink.StateMachine.Settings.standard.backoff.cap.wholeMilliseconds
        public var queueSegments = Uplink.StateMachine.Settings.standard.queueSegments
        public var queueMaxAgeMs = Uplink.StateMachine.Settings.standard.queueMaxAgeMs
        /// Unset: two ping periods, at most 10 s.
        public var livenessMs: Int?
        public var connectTimeoutMs = Uplink.Settings.standardConnectTimeout.wholeMilliseconds
        public var drainMs = Uplink.StateMachine.Settings.standard.drain.wholeMilliseconds
        public var restartSpreadMs = Uplink.StateMachine.Settings.standard.restartSpread.wholeMilliseconds
        /// The small copy streamed for guidance; with none of its keys set, one stream.
        public var video = UplinkVideo()

        public init() {}
    }

    /// The guidance stream (`uplink.video.*`): setting any key makes two streams, the others
    /// taking ``Defaults``.
    public struct UplinkVideo: Sendable, Equatable {
        public var width: Int?
        public var height: Int?
        public var fps: Int?
        public var preference: [String]?
        public var crf: Int?

        public enum Defaults {
            public static let width = 640
            public static let height = 360
            public static let fps = 10
            public static let preference = ["libx265"]
            public static let crf = 28
        }

        public init() {}

        /// Two streams: evidence on the card, this copy on the wire.
        public var isSet: Bool { width != nil || height != nil || fps != nil || preference != nil || crf != nil }
    }

    public struct Guidance: Sendable, Equatable {
        public var maxAgeMs = Uplink.StateMachine.Settings.standard.guidanceMaxAge.wholeMilliseconds
        /// Without a session this long, the device checks the road itself (``Offline``).
        public var offlineAfterMs = 15_000

        public init() {}
    }

    /// Local guidance: checks on the captured frames while no server guides (``LocalGuidance.StateMachine``).
    public struct Offline: Sendable, Equatable {
        public var enabled = true
        public var fps = 1
        public var repeatMs = 30_000
        public var maxCpuPercent = 50

        public init() {}
    }

    public struct Speech: Sendable, Equatable {
        /// Deprecated: an old name of ``Device/locale``.
        public var locale: String?
        /// `alsa`, or `wav:DIR` for one WAV file per utterance.
        public var sink = "alsa"
        public var device = "default"

        public init() {}
    }

    // Not `Haptics`: that is the HAL player.
    public struct HapticsSettings: Sendable, Equatable {
        /// Unset: no vibration motor; the pulses are logged.
        public var chip: String?
        /// An offset on the chip (`5`) or a line name (`haptic`).
        public var line = "0"
        public var activeLow = false
        public var required = true
        public var clear = [150]
        public var alert = [80, 80, 80, 80, 80]
        public var incident = [400, 150, 400, 150, 400]

        public init() {}
    }

    public struct Sensors: Sendable, Equatable {
        public struct Accel: Sendable, Equatable {
            /// Unset: no G-sensor.
            public var device: String?
            public var hz = 25

            public init() {}
        }

        public struct GPS: Sendable, Equatable {
            /// `host:port` of gpsd; unset: no GPS.
            public var gpsd: String?

            public init() {}
        }

        public var accel = Accel()
        public var gps = GPS()

        public init() {}
    }

    public struct Incident: Sendable, Equatable {
        public var sensitivity: IncidentSensitivity = .medium
        public var beforeSeconds = 10
        public var afterSeconds = 10

        public init() {}
    }

    public struct Parking: Sendable, Equatable {
        public struct Ignition: Sendable, Equatable {
            /// As `haptics.chip`; unset: every chip is searched for a line given by name.
            public var chip: String?
            /// An offset, a line name, or the path of a GPIO `value` file; unset: no parking mode.
            public var line: String?
            public var activeLow = false
            public var debounceMs = 500

            public init() {}
        }

        public var ignition = Ignition()
        public var delaySeconds = 60
        public var fps = 5
        public var sensitivity: IncidentSensitivity = .medium
        public var preRollSeconds = 5
        public var afterSeconds = 10

        public init() {}
    }

    /// Clips for the owner (incidents, parking events, `protect`): when they may go up.
    public struct Upload: Sendable, Equatable {
        /// Megabytes of clips a day; unset is no limit.
        public var dailyMegabytes: Int?
        public var when: UploadWhen = .always

        public init() {}
    }

    public enum UploadWhen: String, CaseIterable, Sendable {
        case always, wifi
    }

    public struct Status: Sendable, Equatable {
        public var socket = "/run/dashcam-agent/status.sock"

        public init() {}
    }

    /// How segment bytes travel: binary chunks after the header. (`base64` inside the header is
    /// gone: a segment is bigger than a message may be.)
    public enum Payload: String, CaseIterable, Sendable {
        case chunks
    }

    public struct Log: Sendable, Equatable {
        public var level: Logger.Level = .info

        public init() {}
    }

    public enum SourceKind: String, CaseIterable, Sendable {
        case v4l2
        case testPattern = "test-pattern"
        case file
    }

    /// The capture format asked of the camera; `auto` takes what the driver offers first.
    public enum CapturePixelFormat: String, CaseIterable, Sendable {
        case auto, yuyv, nv12, yu12, mjpeg
    }

    /// How synthetic sources (test pattern, file) hand out frames.
    public enum Pace: String, CaseIterable, Sendable {
        /// One frame per 1/fps seconds, like a camera.
        case realtime
        /// As fast as the pipeline takes them, for tests and benchmarks.
        case fast
    }

    public enum RateControlMode: String, CaseIterable, Sendable {
        case crf, bitrate
    }
}

// MARK: - Keys

extension AgentConfig {
    /// Every configuration key, in documentation order. This is the only list of keys: loading,
    /// the unknown-key check, error messages and the README table all come from it.
    public static let keys: [ConfigKeyInfo<AgentConfig>] = [
        .optionalString(
            "device.locale", \.device.locale, type: "BCP 47",
            "The device's one language: asked of the server in `hello`, spoken by guidance without `lang` and by the status phrases; unset means LC_ALL, LC_MESSAGES or LANG, else en-US."
        ),
        .choice(
            "camera.source", \.camera.source,
            "Where frames come from: a V4L2 camera, a generated test pattern, or a video file."),
        .string(
            "camera.device", \.camera.device, type: "path",
            "V4L2 device node to capture from (source `v4l2`)."),
        .optionalString(
            "camera.file", \.camera.file, type: "path",
            "Video file played as the camera; required when source is `file`."),
        .int("camera.width", \.camera.width, 16...4096, even: true, "Capture width in pixels."),
        .int("camera.height", \.camera.height, 16...4096, even: true, "Capture height in pixels."),
        .int("camera.fps", \.camera.fps, 1...120, "Frames per second captured and recorded."),
        .choice(
            "camera.pixelFormat", \.camera.pixelFormat,
            "Pixel format asked of the camera; `auto` takes what the driver offers first."),
        .int(
            "camera.buffers", \.camera.buffers, 2...32,
            "V4L2 capture buffers; more absorb scheduling jitter at the cost of memory."),
        .int(
            "camera.pollTimeoutMs", \.camera.pollTimeoutMs, 50...60000,
            "How long one wait for a frame may take before it counts as a poll timeout, in ms."),
        .int(
            "camera.stallTimeouts", \.camera.stallTimeouts, 1...100,
            "This many poll timeouts in a row mean the camera has stalled and is reopened."),
        .range(
            "camera.reopenBackoffMs", \.camera.reopenBackoffMs, within: 1...600_000,
            "Wait before reopening a lost camera, in ms: starts at min, grows to at most max."),
        .choice(
            "camera.pace", \.camera.pace,
            "For `test-pattern` and `file`: `realtime` paces frames at fps (a test pattern read late loses frames, as a camera does), `fast` sends them as fast as they are taken."
        ),
        .list(
            "encoder.preference", \.encoder.preference,
            "FFmpeg encoders of the recording (the evidence stream), tried in order; the first that opens is used. HEVC and H.264 with two streams (uplink.video); with one, only the HEVC ones are tried, since that stream also goes to the server."
        ),
        .choice(
            "encoder.rateControl", \.encoder.rateControl,
            "`crf` holds quality constant (encoder.crf); `bitrate` targets encoder.bitrateKbps."),
        .int(
            "encoder.crf", \.encoder.crf, 0...51,
            "Constant rate factor for `crf`; lower means better quality and bigger files."),
        .int(
            "encoder.bitrateKbps", \.encoder.bitrateKbps, 50...100_000,
            "Target bitrate for `bitrate`, in kbit/s."),
        .optionalInt(
            "encoder.maxrateKbps", \.encoder.maxrateKbps, 50...100_000,
            "VBV maximum rate for `bitrate`, in kbit/s; unset means encoder.bitrateKbps."),
        .optionalInt(
            "encoder.bufsizeKbps", \.encoder.bufsizeKbps, 50...200_000,
            "VBV buffer size for `bitrate`, in kbit; unset means 2 × encoder.bitrateKbps."),
        .int(
            "encoder.segmentSeconds", \.encoder.segmentSeconds, 1...60,
            "Length of each recorded segment file, in seconds."),
        .string(
            "recording.dir", \.recording.dir, type: "path",
            "Folder of the local recording: one subfolder per UTC day, and `protected/` for kept incidents; a relative path is taken from the working directory."
        ),
        .optionalInt(
            "recording.maxMegabytes", \.recording.maxMegabytes, 1...10_000_000,
            "Loop recording: the oldest unprotected segments are deleted to keep them under this size, in MB; unset keeps them under 80 % of the size of the disk holding recording.dir. Reloaded on SIGHUP."
        ),
        .int(
            "recording.protectedMaxMegabytes", \.recording.protectedMaxMegabytes, 1...10_000_000,
            "Cap of the segments kept with `dashcam-agent protect`, in MB; a request makes room by deleting those protected before it, oldest first. Reloaded on SIGHUP."
        ),
        .int(
            "recording.minFreeMegabytes", \.recording.minFreeMegabytes, 0...1_000_000,
            "Free space kept on the disk, in MB, by deleting the oldest unprotected segments; a protected one goes only when the next segment would not fit at all. Reloaded on SIGHUP."
        ),
        .optionalString(
            "uplink.url", \.uplink.url, type: "url",
            "Guidance server, `wss://HOST[:PORT]/v1/stream`; unset records without streaming."),
        .string(
            "uplink.tokenFile", \.uplink.tokenFile, type: "path",
            "File holding the bearer token; must not be readable by group or others. Never logged."),
        .string(
            "uplink.credentialsFile", \.uplink.credentialsFile, type: "path",
            "Where a paired car keeps its credentials (device id, refresh and access tokens; mode 0600, written by the agent). Never logged."
        ),
        .bool(
            "uplink.pairing", \.uplink.pairing,
            "With neither uplink.tokenFile nor credentials, pair to an owner's account: the car says a nine-digit code to type on the server's page (`dashcam-agent pair` says it again)."
        ),
        .optionalString(
            "uplink.caFile", \.uplink.caFile, type: "path",
            "PEM CA certificates to verify the server with, instead of the system trust store."),
        .bool(
            "uplink.allowInsecure", \.uplink.allowInsecure,
            "Allow a plain `ws://` URL (no TLS); for a server on the same machine or in tests."),
        .string(
            "uplink.deviceId", \.uplink.deviceId, type: "string",
            "Device name sent in `hello`, a label for the server's log: the server identifies the device by its token (its tokens file says which device id counts)."
        ),
        .optionalString(
            "uplink.locale", \.uplink.locale, type: "BCP 47",
            "Deprecated: an old name of device.locale (a notice is logged); set to another language than device.locale is an error."),
        .choice(
            "uplink.payload", \.uplink.payload,
            "`chunks` sends each MP4 as binary messages of up to 64 KiB after its header, the only way (`base64` in the header is no longer offered: a segment does not fit one message)."
        ),
        .int(
            "uplink.pingSeconds", \.uplink.pingSeconds, 1...300,
            "Keepalive ping period, in seconds; with nothing outstanding, no pong within two periods means the connection is dead."),
        .range(
            "uplink.reconnectBackoffMs", \.uplink.reconnectBackoffMs, within: 10...600_000,
            "Wait before reconnecting, in ms: a random wait up to min, doubling per failed attempt up to max."),
        .int(
            "uplink.queueSegments", \.uplink.queueSegments, 1...100,
            "Segments held for the server: waiting to be sent, or sent and not yet acknowledged; when full the oldest is dropped (the camera never waits)."
        ),
        .int(
            "uplink.queueMaxAgeMs", \.uplink.queueMaxAgeMs, 1000...600_000,
            "Segments captured longer ago than this are dropped instead of sent or re-sent, in ms."),
        .optionalInt(
            "uplink.livenessMs", \.uplink.livenessMs, 1000...600_000,
            "A session with a segment or the welcome outstanding that hears nothing (no message, no pong) for this long is given up and a new one opened, in ms; unset means two ping periods, at most 10 s."
        ),
        .int(
            "uplink.connectTimeoutMs", \.uplink.connectTimeoutMs, 500...120_000,
            "Deadline for connect, TLS handshake and WebSocket upgrade together, in ms; then the attempt is given up and retried."),
        .int(
            "uplink.drainMs", \.uplink.drainMs, 0...60_000,
            "On shutdown, how long to wait for the server to acknowledge (and answer) the segments still held, in ms, before closing with 1001."
        ),
        .int(
            "uplink.restartSpreadMs", \.uplink.restartSpreadMs, 0...600_000,
            "When the server closes the session because it is restarting (close 1012), reconnect after a random wait up to this, in ms, so that its cars do not all come back in the same second."
        ),
        .optionalInt(
            "uplink.video.width", \.uplink.video.width, 16...4096, even: true,
            "Width of the guidance stream, the small HEVC copy sent to the server; setting any uplink.video key records the camera's full size as evidence and sends this copy (scaled once, its segments aligned with the evidence's). Unset: \(UplinkVideo.Defaults.width) when another uplink.video key is set; with none set, one stream is recorded and sent."
        ),
        .optionalInt(
            "uplink.video.height", \.uplink.video.height, 16...4096, even: true,
            "Height of the guidance stream; unset: \(UplinkVideo.Defaults.height) (see uplink.video.width)."),
        .optionalInt(
            "uplink.video.fps", \.uplink.video.fps, 1...60,
            "Frames per second of the guidance stream, at most camera.fps (every camera.fps / this-th frame, the evidence's segment starts always); unset: \(UplinkVideo.Defaults.fps)."
        ),
        .optionalList(
            "uplink.video.preference", \.uplink.video.preference,
            "FFmpeg HEVC encoders of the guidance stream, tried in order; unset: [\(UplinkVideo.Defaults.preference.joined(separator: ", "))]."
        ),
        .optionalInt(
            "uplink.video.crf", \.uplink.video.crf, 0...51,
            "Constant rate factor of the guidance stream (lower: better and bigger); unset: \(UplinkVideo.Defaults.crf)."),
        .int(
            "guidance.maxAgeMs", \.guidance.maxAgeMs, 1000...600_000,
            "Guidance about a segment captured longer ago than this is dropped: stale road information is worse than none."),
        .int(
            "guidance.offlineAfterMs", \.guidance.offlineAfterMs, 1000...3_600_000,
            "Without a session with the server for this long (at once when the usage is exhausted or the server has no model service), the device warns from its own checks of the frames (offline.*), in ms. Reloaded on SIGHUP."
        ),
        .bool(
            "offline.enabled", \.offline.enabled,
            "Local guidance when no server guides: too dark, lens covered, frozen picture, pedestrians, spoken in the device language; `false` turns it off. Reloaded on SIGHUP."
        ),
        .int(
            "offline.fps", \.offline.fps, 1...10,
            "Frames a second that local guidance looks at, at most; a frame due while the last one is still being looked at is skipped and counted."
        ),
        .int(
            "offline.repeatMs", \.offline.repeatMs, 1000...3_600_000,
            "A local warning is not spoken again within this time, in ms, even if the finding stays or comes back. Reloaded on SIGHUP."),
        .int(
            "offline.maxCpuPercent", \.offline.maxCpuPercent, 5...100,
            "Share of one CPU core the local checks may use on average: after a look that took t, the next frame is taken no sooner than t × (100 / this − 1)."
        ),
        .optionalString(
            "speech.locale", \.speech.locale, type: "BCP 47",
            "Deprecated: an old name of device.locale (a notice is logged); set to another language than device.locale is an error."),
        .string(
            "speech.sink", \.speech.sink, type: "string",
            "Where speech goes: `alsa` (the sound card, speech.device) or `wav:DIR` (one WAV file per utterance)."),
        .string(
            "speech.device", \.speech.device, type: "string",
            "ALSA playback device for the `alsa` sink, e.g. `default`, `hw:1,0`, `plughw:CARD=Loopback,DEV=0`."),
        .optionalString(
            "haptics.chip", \.haptics.chip, type: "string",
            "GPIO chip of the vibration motor: path, name, number or label; unset means no motor (pulses are logged)."),
        .string(
            "haptics.line", \.haptics.line, type: "string",
            "The motor's line on that chip: an offset (`5`) or the line's name (`haptic`)."),
        .bool("haptics.activeLow", \.haptics.activeLow, "The motor runs while the line is low."),
        .bool(
            "haptics.required", \.haptics.required,
            "A missing chip or busy line stops the agent at start; `false` warns and runs without vibration."),
        .intList(
            "haptics.clear", \.haptics.clear, each: HapticPattern.stepRange, count: 1...HapticPattern.maxSteps,
            "Pattern for a clear road, in ms: on, off, on, …. Reloaded on SIGHUP."),
        .intList(
            "haptics.alert", \.haptics.alert, each: HapticPattern.stepRange, count: 1...HapticPattern.maxSteps,
            "Pattern played with urgent guidance, in ms: on, off, on, …. Reloaded on SIGHUP."),
        .intList(
            "haptics.incident", \.haptics.incident, each: HapticPattern.stepRange, count: 1...HapticPattern.maxSteps,
            "Pattern played with \"Incident saved.\", in ms: on, off, on, …."),
        .optionalString(
            "sensors.accel.device", \.sensors.accel.device, type: "string",
            "The G-sensor, a Linux IIO accelerometer: its driver's device name (`lis3dh`), `iio:deviceN`, its sysfs folder or `/dev/iio:deviceN`; unset means no G-sensor (no incidents)."
        ),
        .int(
            "sensors.accel.hz", \.sensors.accel.hz, 1...400,
            "Readings a second taken from the G-sensor. Polled through sysfs, the chip is set to the fastest rate it offers; read from its buffer (a driver with a trigger), to the slowest rate not below this."
        ),
        .optionalString(
            "sensors.gps.gpsd", \.sensors.gps.gpsd, type: "host:port",
            "gpsd to read the GPS from (`127.0.0.1:2947`; a host alone means port 2947): a point a second goes into each segment's JSON line and header, a GPX file beside each MP4, the first fix into the MP4's location; unset means no GPS."
        ),
        .choice(
            "incident.sensitivity", \.incident.sensitivity,
            "How hard a shock saves an incident, on gravity-removed acceleration averaged over 60 ms: \(IncidentSensitivity.documentation); a hard brake (0.7 g) counts at `high` only."
        ),
        .int(
            "incident.beforeSeconds", \.incident.beforeSeconds, 0...60,
            "An incident keeps the segments from this many seconds before its first impact."),
        .int(
            "incident.afterSeconds", \.incident.afterSeconds, 1...60,
            "... to this many seconds after its last; impacts within that time are one incident, of at most a minute."),
        .optionalString(
            "parking.ignition.chip", \.parking.ignition.chip, type: "string",
            "GPIO chip of the ignition sense (an opto-isolated input): path, name, number or label; unset means every chip is searched for a line given by name."
        ),
        .optionalString(
            "parking.ignition.line", \.parking.ignition.line, type: "string",
            "The ignition's line: an offset (`2`), the line's name (`ignition`), or the path of a GPIO `value` file (read every 200 ms); unset means no parking mode."
        ),
        .bool("parking.ignition.activeLow", \.parking.ignition.activeLow, "The ignition is on while the line is low."),
        .int(
            "parking.ignition.debounceMs", \.parking.ignition.debounceMs, 0...10_000,
            "The ignition's level counts once it has held this long, in ms."),
        .int(
            "parking.delaySeconds", \.parking.delaySeconds, 0...3600,
            "Parking mode starts this long after the ignition went off; ignition on resumes driving mode at once."),
        .int(
            "parking.fps", \.parking.fps, 1...30,
            "Frames per second the camera runs at while parked: what motion is looked for in and the clips are recorded at."),
        .choice(
            "parking.sensitivity", \.parking.sensitivity,
            "What records a clip while parked: an impact over the levels of `incident.sensitivity` (\(IncidentSensitivity.documentation)), or motion in 2 (high), 4 (medium) or 10 (low) of 144 blocks of the view; `off` records nothing."
        ),
        .int(
            "parking.preRollSeconds", \.parking.preRollSeconds, 0...30,
            "A parked car's clip starts this many seconds before what triggered it (held in memory)."),
        .int(
            "parking.afterSeconds", \.parking.afterSeconds, 1...60,
            "... and runs this long after the last trigger, up to a minute in all."),
        .optionalInt(
            "upload.dailyMegabytes", \.upload.dailyMegabytes, 1...1_000_000,
            "Megabytes of evidence clips (incidents, parking events, `protect`) uploaded for the owner a day, counted from local midnight; the rest waits for the next day, on the card. Unset: no limit."
        ),
        .choice(
            "upload.when", \.upload.when,
            "When clips upload: `always`, or `wifi` only while the uplink's default route is on a wireless LAN interface (the kernel's `DEVTYPE=wlan`). Guidance segments always go, and always first."
        ),
        .string(
            "status.socket", \.status.socket, type: "path",
            "Unix socket where `dashcam-agent status` and `say-status` reach the running agent."),
        .choice("log.level", \.log.level, "Least severe log level that is printed. Reloaded on SIGHUP.")
    ]

    /// Environment variables that set keys start with this, e.g. `DASHCAM_CAMERA_FPS`.
    public static let environmentPrefix = "DASHCAM"

    /// Checks between keys, run by `load` after every key is read.
    public func validate() throws(ConfigError) {
        try validateLocale()
        if speech.sink != "alsa", !(speech.sink.hasPrefix("wav:") && speech.sink.count > 4) {
            throw .invalidOption("speech.sink", speech.sink, "`alsa` or `wav:DIR`")
        }
        if camera.source == .file, camera.file == nil {
            throw .missingKey("camera.file", reason: "camera.source is 'file'; set it to the video file to play")
        }
        try validateUplinkURL()
        try validateUplinkVideo()
        if let gpsd = sensors.gps.gpsd, GpsdClient.address(gpsd) == nil {
            throw .invalidOption("sensors.gps.gpsd", gpsd, "HOST:PORT, [IPV6]:PORT, or a host alone (gpsd's port, 2947)")
        }
        if let chip = parking.ignition.chip, parking.ignition.line == nil {
            throw .missingKey(
                "parking.ignition.line", reason: "parking.ignition.chip is '\(chip)'; set the ignition's line on it (an offset or a name)")
        }
        if let line = parking.ignition.line {
            if line.isEmpty {
                throw .invalidOption("parking.ignition.line", line, "a line offset, a line name, or the path of a GPIO value file")
            }
            if let offset = Int(line), offset < 0 {
                throw .invalidOption(
                    "parking.ignition.line", line,
                    "a line offset, 0 or more, a line name such as `ignition`, or the path of a GPIO value file")
            }
        }
    }
}

extension ConfigKeyInfo where Root == AgentConfig {
    /// The key table of device-config/README.md (`AgentConfig.markdownTable()`); a test keeps the README equal to it.
    public static func markdownTable() -> String {
        AgentConfig.markdownTable()
    }
}
