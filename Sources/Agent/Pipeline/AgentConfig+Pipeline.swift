import ConfigSupport
public import HAL
public import Logging

extension AgentConfig {
    /// The size and rate segments are encoded at.
    public var videoFormat: VideoFormat {
        VideoFormat(width: camera.width, height: camera.height, fps: camera.fps)
    }

    /// The recording's encoder: the evidence stream, or the one stream (HEVC only: it is sent too).
    public var encoderSettings: EncoderSettings {
        let rateControl: HAL.RateControl =
            switch encoder.rateControl {
            case .crf: .crf(encoder.crf)
            case .bitrate:
                .bitrate(
                    kbps: encoder.bitrateKbps, maxrateKbps: encoder.effectiveMaxrateKbps,
                    bufsizeKbps: encoder.effectiveBufsizeKbps)
            }
        return EncoderSettings(
            preference: encoder.preference, rateControl: rateControl, format: videoFormat,
            keyframeInterval: camera.fps * encoder.segmentSeconds,
            codecs: uplink.video.isSet ? [.hevc, .h264] : [.hevc])
    }

    /// The guidance stream's size and rate (`uplink.video`); nil with one stream.
    public var guidanceFormat: VideoFormat? {
        guard uplink.video.isSet else { return nil }
        return VideoFormat(
            width: uplink.video.width ?? UplinkVideo.Defaults.width,
            height: uplink.video.height ?? UplinkVideo.Defaults.height,
            fps: uplink.video.fps ?? UplinkVideo.Defaults.fps)
    }

    /// The guidance copy's encoder (HEVC, what the server takes); nil with one stream.
    public var guidanceEncoderSettings: EncoderSettings? {
        guidanceFormat.map { format in
            EncoderSettings(
                preference: uplink.video.preference ?? UplinkVideo.Defaults.preference,
                rateControl: .crf(uplink.video.crf ?? UplinkVideo.Defaults.crf), format: format,
                keyframeInterval: format.fps * encoder.segmentSeconds, codecs: [.hevc])
        }
    }

    public func pipelineSettings(maxSegments: Int?) -> CapturePipeline.Settings {
        var settings = CapturePipeline.Settings(
            encoder: encoderSettings, segmentSeconds: encoder.segmentSeconds,
            reopenBackoffMs: (camera.reopenBackoffMs.lowerBound, camera.reopenBackoffMs.upperBound),
            maxSegments: maxSegments)
        settings.guidance = guidanceEncoderSettings
        return settings
    }

    /// The encoder segments are made with: the first of `encoder.preference` that opens on this
    /// machine, for frames in `inputFormat` (what the source delivers). Those passed over are
    /// one line, with why each did not open.
    public func makeEncoder(inputFormat: PixelFormat, logger: Logger) throws -> any VideoEncoder {
        try Self.open(encoderSettings, inputFormat: inputFormat, role: uplink.video.isSet ? "evidence" : nil, logger: logger)
    }

    /// The guidance copy's encoder (`uplink.video.preference`), for frames the scaler makes from `inputFormat`.
    public func makeGuidanceEncoder(inputFormat: PixelFormat, logger: Logger) throws -> any VideoEncoder {
        guard let settings = guidanceEncoderSettings else {
            throw ConfigError.missingKey("uplink.video.width", reason: "no guidance stream is set")
        }
        return try Self.open(settings, inputFormat: inputFormat, role: "guidance", logger: logger)
    }

    static func open(
        _ settings: EncoderSettings, inputFormat: PixelFormat, role: String?, logger: Logger,
        hardware: EncoderHardware = .system
    ) throws -> any VideoEncoder {
        let encoder = try LibavEncoder(settings: settings, inputFormat: inputFormat, hardware: hardware)
        if !encoder.skipped.isEmpty {
            logger.info(
                "encoder\(role.map { " (\($0))" } ?? ""): \(encoder.name); passed over \(encoder.skipped.map { "\($0.name) (\($0.reason))" }.joined(separator: ", "))"
            )
        }
        return encoder
    }

    /// `uplink.video` against the camera: a copy no larger and no faster than what it is made from.
    func validateUplinkVideo() throws(ConfigError) {
        guard let format = guidanceFormat else { return }
        if format.fps > camera.fps {
            throw .invalidOption(
                "uplink.video.fps", "\(format.fps)",
                "at most camera.fps (\(camera.fps)): the guidance stream takes a share of the camera's frames")
        }
        if format.width > camera.width {
            throw .invalidOption(
                "uplink.video.width", "\(format.width)", "at most camera.width (\(camera.width)): the guidance stream is a smaller copy")
        }
        if format.height > camera.height {
            throw .invalidOption(
                "uplink.video.height", "\(format.height)", "at most camera.height (\(camera.height)): the guidance stream is a smaller copy"
            )
        }
    }

    /// The frame source `camera.source` names, at `camera.fps` or at `fps` (a parked car's).
    public func makeSource(fps: Int? = nil, logger: Logger) -> any FrameSource {
        var videoFormat = videoFormat
        if let fps { videoFormat.fps = fps }
        return switch camera.source {
        case .v4l2:
            V4L2Camera(
                options: .init(
                    device: camera.device, format: videoFormat, pixelFormat: camera.pixelFormat.rawValue,
                    bufferCount: camera.buffers, pollTimeoutMs: camera.pollTimeoutMs,
                    stallTimeouts: camera.stallTimeouts),
                logger: logger)
        case .testPattern:
            TestPatternSource(format: videoFormat, realtime: camera.pace == .realtime)
        case .file:
            FileSource(path: camera.file ?? "", fps: videoFormat.fps, realtime: camera.pace == .realtime)
        }
    }
}
