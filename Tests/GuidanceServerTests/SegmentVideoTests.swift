import Foundation
@testable import GuidanceServer
import TestSupport
import Testing

/// What the server makes of a segment's video with libavcodec, checked with ffprobe.
@Suite(.serialized) struct SegmentVideoTests {
    func probe(_ data: Data, suffix: String) async throws -> [String: String] {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).\(suffix)")
        defer { try? FileManager.default.removeItem(at: file) }
        try data.write(to: file)
        let output = try await Command.executeAsync("ffprobe", [
            "-v", "error", "-count_frames", "-select_streams", "v:0",
            "-show_entries", "stream=codec_name,width,height,nb_read_frames,pix_fmt", "-of", "default=noprint_wrappers=1", file.path,
        ]).stdout
        return Dictionary(output.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }, uniquingKeysWith: { $1 })
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"), arguments: [2, 3, 4])
    func keyframesAreJPEGsOfTheSegmentsFrames(count: Int) async throws {
        let jpegs = try await SegmentVideo.keyframeJPEGs(from: (await SampleSegment.data()), count: count)
        #expect(jpegs.count == count)
        for jpeg in jpegs {
            #expect(jpeg.prefix(2) == Data([0xFF, 0xD8]), "a JPEG starts with SOI")
            let probed = try await probe(jpeg, suffix: "jpg")
            #expect(probed["codec_name"] == "mjpeg")
            #expect(probed["width"] == "320" && probed["height"] == "180")
        }
        // Spread over the clip: testsrc2 moves, so the first and last frames differ.
        #expect(jpegs.first != jpegs.last)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func keyframesAreScaledDownToTheWidthAsked() async throws {
        let jpegs = try await SegmentVideo.keyframeJPEGs(from: (await SampleSegment.data()), count: 2, maxWidth: 160)
        let probed = try await probe(try #require(jpegs.first), suffix: "jpg")
        #expect(probed["width"] == "160" && probed["height"] == "90")
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func theClipTranscodesToH264FrameForFrame() async throws {
        let h264 = try await SegmentVideo.h264(from: (await SampleSegment.data()))
        let probed = try await probe(h264, suffix: "mp4")
        let source = try await probe((await SampleSegment.data()), suffix: "mp4")
        #expect(source["codec_name"] == "hevc")
        #expect(probed["codec_name"] == "h264")
        #expect(probed["width"] == "320" && probed["height"] == "180")
        #expect(probed["nb_read_frames"] == source["nb_read_frames"])
    }

    @Test func somethingThatIsNotVideoIsAnErrorNotACrash() async throws {
        await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.keyframeJPEGs(from: Data("not a video".utf8), count: 3)
        }
        await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.h264(from: Data(repeating: 0, count: 4096))
        }
    }
}
