import Foundation
import HAL
import Testing

@Suite struct EncoderTests {
    func settings(_ preference: [String], codecs: Set<VideoCodec> = [.hevc]) -> EncoderSettings {
        EncoderSettings(
            preference: preference, rateControl: .crf(28),
            format: VideoFormat(width: 320, height: 180, fps: 10), keyframeInterval: 50, codecs: codecs)
    }

    /// A machine with none of the hardware: no render node, no mem2mem device, no NVIDIA driver.
    let bare = EncoderHardware(sysfs: "/nonexistent-sysfs", dev: "/nonexistent-dev") { _, _ in nil }

    @Test func theFirstEncoderThatOpensWinsAndTheOthersSayWhy() throws {
        let encoder = try LibavEncoder(
            settings: settings(["no_such_encoder", "mpeg4", "libx265", "hevc_nvenc"]),
            inputFormat: .yuv420p, hardware: bare)
        #expect(encoder.name == "libx265")
        #expect(encoder.codec == .hevc)
        #expect(encoder.skipped.map(\.name) == ["no_such_encoder", "mpeg4"])
        #expect(encoder.skipped[0].reason == "not in this FFmpeg build")
        #expect(encoder.skipped[1].reason == "not an HEVC or H.264 encoder")
    }

    @Test func hardwareEncodersWithoutHardwareArePassedOverWithOnePlainReasonEach() throws {
        let preference = ["hevc_v4l2m2m", "h264_v4l2m2m", "hevc_vaapi", "h264_vaapi", "hevc_nvenc", "h264_nvenc", "libx264", "libx265"]
        let encoder = try LibavEncoder(settings: settings(preference), inputFormat: .yuyv422, hardware: bare)
        #expect(encoder.name == "libx265")
        let reasons = Dictionary(uniqueKeysWithValues: encoder.skipped.map { ($0.name, $0.reason) })
        #expect(reasons["hevc_v4l2m2m"] == "no V4L2 memory-to-memory HEVC encoder (no V4L2 devices)")
        #expect(reasons["hevc_vaapi"]?.hasPrefix("no VAAPI device") == true)
        #expect(reasons["hevc_nvenc"] == "no NVIDIA driver (/nonexistent-dev/nvidiactl)")
        // One stream goes to the server: the H.264 ones are passed over for what they make.
        #expect(reasons["libx264"] == "an H.264 encoder; this stream is HEVC")
        #expect(reasons["h264_v4l2m2m"] == "an H.264 encoder; this stream is HEVC")
        // libx265 does not take YUYV: frames are converted to its first format.
        #expect(encoder.encoderPixelFormat == .yuv420p)
    }

    @Test func evidenceMayBeH264InThePreferenceOrder() throws {
        let encoder = try LibavEncoder(
            settings: settings(["h264_vaapi", "libx264", "libx265"], codecs: [.hevc, .h264]),
            inputFormat: .yuv420p, hardware: bare)
        #expect(encoder.name == "libx264")
        #expect(encoder.codec == .h264)
        #expect(encoder.stream.codec == .h264)
        #expect(!encoder.stream.parameterSets.isEmpty, "libx264 opens with a global header: SPS and PPS out of band")
    }

    @Test func noEncoderOpeningListsEveryAttempt() {
        #expect {
            _ = try LibavEncoder(settings: settings(["nope", "mpeg4"]), inputFormat: .yuv420p, hardware: bare)
        } throws: { error in
            let text = "\(error)"
            return text.hasPrefix("no HEVC encoder opens") && text.contains("nope (not in this FFmpeg build)")
                && text.contains("mpeg4 (not an HEVC or H.264 encoder)")
        }
    }

    @Test func aVAAPIEncoderWithARenderNodeThatIsNotAGPUSaysWhyItDidNotOpen() throws {
        // sysfs lists a render node whose device file is not a DRM device: the VAAPI device fails
        // to open, and that is the reason given (not FFmpeg's "hardware frames reference" error).
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("drm-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("sys/class/drm/renderD128"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: root.appendingPathComponent("dev/dri"), withIntermediateDirectories: true)
        try Data().write(to: root.appendingPathComponent("dev/dri/renderD128"))
        let hardware = EncoderHardware(sysfs: root.appendingPathComponent("sys").path, dev: root.appendingPathComponent("dev").path) {
            _, _ in nil
        }
        #expect(hardware.renderNode() == root.appendingPathComponent("dev/dri/renderD128").path)
        let encoder = try LibavEncoder(settings: settings(["hevc_vaapi", "libx265"]), inputFormat: .yuv420p, hardware: hardware)
        #expect(encoder.name == "libx265")
        let reason = try #require(encoder.skipped.first?.reason)
        #expect(reason.hasPrefix("VAAPI device \(root.path)/dev/dri/renderD128 does not open"), "\(reason)")
    }

    @Test func bitrateForAMem2memEncoderFollowsTheCRFAndTheSize() {
        let hd = VideoFormat(width: 1920, height: 1080, fps: 30)
        #expect(LibavEncoder.bitrateKbps(forCRF: 23, format: hd, codec: .h264) == 6220)
        #expect(LibavEncoder.bitrateKbps(forCRF: 29, format: hd, codec: .h264) == 3110)
        #expect(LibavEncoder.bitrateKbps(forCRF: 23, format: hd, codec: .hevc) == 4147)
        #expect(LibavEncoder.bitrateKbps(forCRF: 51, format: VideoFormat(width: 16, height: 16, fps: 1), codec: .hevc) == 100)
    }
}

/// Finding a memory-to-memory encoder as FFmpeg would, on sysfs laid out as the kernel does it
/// (`/sys/class/video4linux/videoN/name`), with each node's answer to QUERYCAP and ENUM_FMT given.
@Suite struct EncoderHardwareTests {
    func sysfs(_ devices: [Int: String]) throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("sysfs-\(UUID().uuidString)")
        for (number, name) in devices {
            let folder = root.appendingPathComponent("class/video4linux/video\(number)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data("\(name)\n".utf8).write(to: folder.appendingPathComponent("name"))
            try Data("81:\(number)\n".utf8).write(to: folder.appendingPathComponent("dev"))
        }
        return root
    }

    /// A Raspberry Pi 4: the camera, and bcm2835-codec's decoder, encoder and ISP.
    let pi4: [Int: String] = [0: "unicam-image", 10: "bcm2835-codec-decode", 11: "bcm2835-codec-encode", 12: "bcm2835-codec-isp"]

    func answer(_ node: String, _ name: String) -> EncoderHardware.VideoDevice? {
        switch name {
        case "bcm2835-codec-encode": .init(node: node, name: name, memoryToMemory: true, makes: [.h264])
        case "bcm2835-codec-decode", "bcm2835-codec-isp": .init(node: node, name: name, memoryToMemory: true, makes: [])
        default: .init(node: node, name: name, memoryToMemory: false, makes: [])
        }
    }

    @Test func aPi4HasAnH264EncoderAndNoHEVCOne() throws {
        let root = try sysfs(pi4)
        defer { try? FileManager.default.removeItem(at: root) }
        let hardware = EncoderHardware(sysfs: root.path, dev: "/dev", askVideoDevice: answer)
        #expect(hardware.videoDevices().map(\.node) == ["/dev/video0", "/dev/video10", "/dev/video11", "/dev/video12"])
        #expect(hardware.missing(for: "h264_v4l2m2m", codec: .h264) == nil)
        #expect(
            hardware.missing(for: "hevc_v4l2m2m", codec: .hevc)
                == "no V4L2 memory-to-memory HEVC encoder (/dev/video0 unicam-image, /dev/video10 bcm2835-codec-decode, /dev/video11 bcm2835-codec-encode, /dev/video12 bcm2835-codec-isp)"
        )
        #expect(hardware.missing(for: "libx264", codec: .h264) == nil)
    }

    @Test func aPCWithAWebcamHasNone() throws {
        let root = try sysfs([0: "HD Pro Webcam C920", 1: "HD Pro Webcam C920"])
        defer { try? FileManager.default.removeItem(at: root) }
        let hardware = EncoderHardware(sysfs: root.path, dev: "/dev", askVideoDevice: answer)
        #expect(
            hardware.missing(for: "h264_v4l2m2m", codec: .h264)?.hasPrefix(
                "no V4L2 memory-to-memory H.264 encoder (/dev/video0 HD Pro Webcam C920") == true)
        #expect(hardware.renderNode() == nil)
    }

    @Test func theKernelsAnswerForANodeThatIsNotThere() {
        #expect(EncoderHardware.ask("/nonexistent/video9", "x") == nil)
    }
}
