public import Logging

/// Everything the agent reads from configuration.
///
/// `AgentConfig()` is the built-in defaults. They are written only here: the key table
/// (`AgentConfig.keys`) and the README quote them from an instance, so they can't disagree.
/// Build a real one with `AgentConfig.load(file:environment:overrides:)`.
public struct AgentConfig: Sendable, Equatable {
    public var camera = Camera()
    public var encoder = Encoding()
    public var output = Output()
    public var log = Log()

    public init() {}

    public struct Camera: Sendable, Equatable {
        public var source: SourceKind = .v4l2
        public var device = "/dev/video0"
        /// Required when `source` is `.file`; `load` enforces that.
        public var file: String?
        public var width = 640
        public var height = 360
        public var fps = 10
        public var pixelFormat: PixelFormat = .auto
        public var buffers = 4
        public var pollTimeoutMs = 1000
        /// Poll timeouts in a row after which the camera counts as stalled.
        public var stallTimeouts = 3
        public var reopenBackoffMs = 250...5000
        public var pace: Pace = .realtime

        public init() {}
    }

    // Not `Encoder`: that would shadow Swift.Encoder inside AgentConfig.
    public struct Encoding: Sendable, Equatable {
        public var preference = ["hevc_v4l2m2m", "hevc_vaapi", "hevc_nvenc", "libx265"]
        public var rateControl: RateControl = .crf
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

    public struct Output: Sendable, Equatable {
        public var dir = "segments"

        public init() {}
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
    public enum PixelFormat: String, CaseIterable, Sendable {
        case auto, yuyv, nv12, yu12, mjpeg
    }

    /// How synthetic sources (test pattern, file) hand out frames.
    public enum Pace: String, CaseIterable, Sendable {
        /// One frame per 1/fps seconds, like a camera.
        case realtime
        /// As fast as the pipeline takes them, for tests and benchmarks.
        case fast
    }

    public enum RateControl: String, CaseIterable, Sendable {
        case crf, bitrate
    }
}
