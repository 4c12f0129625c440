import HAL
import Testing

@Suite struct EncoderTests {
    func settings(_ preference: [String]) -> EncoderSettings {
        EncoderSettings(preference: preference, rateControl: .crf(28),
                        format: VideoFormat(width: 320, height: 180, fps: 10), keyframeInterval: 50)
    }

    @Test func theFirstEncoderThatOpensWinsAndTheOthersSayWhy() throws {
        let encoder = try HEVCEncoder(settings: settings(["no_such_encoder", "mpeg4", "libx265", "hevc_nvenc"]),
                                      inputFormat: .yuv420p)
        #expect(encoder.name == "libx265")
        #expect(encoder.skipped.map(\.name) == ["no_such_encoder", "mpeg4"])
        #expect(encoder.skipped[0].reason == "not in this FFmpeg build")
        #expect(encoder.skipped[1].reason == "not an HEVC encoder")
    }

    @Test func hardwareEncodersWithoutHardwareFallBackToLibx265InTheDefaultOrder() throws {
        let preference = ["hevc_v4l2m2m", "hevc_vaapi", "hevc_nvenc", "libx265"]
        let encoder = try HEVCEncoder(settings: settings(preference), inputFormat: .yuyv422)
        #expect(encoder.name == "libx265")
        #expect(encoder.skipped.map(\.name) == ["hevc_v4l2m2m", "hevc_vaapi", "hevc_nvenc"])
        #expect(encoder.skipped.allSatisfy { !$0.reason.isEmpty })
        // libx265 does not take YUYV: frames are converted to its first format.
        #expect(encoder.encoderPixelFormat == .yuv420p)
    }

    @Test func noEncoderOpeningListsEveryAttempt() {
        #expect {
            _ = try HEVCEncoder(settings: settings(["nope", "mpeg4"]), inputFormat: .yuv420p)
        } throws: { error in
            let text = "\(error)"
            return text.contains("nope (not in this FFmpeg build)") && text.contains("mpeg4 (not an HEVC encoder)")
        }
    }
}
