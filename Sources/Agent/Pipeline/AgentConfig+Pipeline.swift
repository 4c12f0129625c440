public import HAL
public import Logging

extension AgentConfig {
    /// The size and rate segments are encoded at.
    public var videoFormat: VideoFormat {
        VideoFormat(width: camera.width, height: camera.height, fps: camera.fps)
    }

    public var encoderSettings: EncoderSettings {
        let rateControl: HAL.RateControl = switch encoder.rateControl {
        case .crf: .crf(encoder.crf)
        case .bitrate: .bitrate(kbps: encoder.bitrateKbps, maxrateKbps: encoder.effectiveMaxrateKbps,
                                bufsizeKbps: encoder.effectiveBufsizeKbps)
        }
        return EncoderSettings(preference: encoder.preference, rateControl: rateControl, format: videoFormat,
                               keyframeInterval: camera.fps * encoder.segmentSeconds)
    }

    public func pipelineSettings(maxSegments: Int?) -> CapturePipeline.Settings {
        .init(encoder: encoderSettings, segmentSeconds: encoder.segmentSeconds,
              reopenBackoffMs: (camera.reopenBackoffMs.lowerBound, camera.reopenBackoffMs.upperBound),
              maxSegments: maxSegments)
    }

    /// The encoder segments are made with: the first of `encoder.preference` that opens on this
    /// machine, for frames in `inputFormat` (what the source delivers). Those that did not open
    /// are logged with why.
    public func makeEncoder(inputFormat: PixelFormat, logger: Logger) throws -> any VideoEncoder {
        let hevc = try HEVCEncoder(settings: encoderSettings, inputFormat: inputFormat)
        for (name, reason) in hevc.skipped {
            logger.info("encoder: \(name) does not open: \(reason)")
        }
        return hevc
    }

    /// The frame source `camera.source` names, at `camera.fps` or at `fps` (a parked car's).
    public func makeSource(fps: Int? = nil, logger: Logger) -> any FrameSource {
        var videoFormat = videoFormat
        if let fps { videoFormat.fps = fps }
        return switch camera.source {
        case .v4l2:
            V4L2Camera(options: .init(device: camera.device, format: videoFormat, pixelFormat: camera.pixelFormat.rawValue,
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
