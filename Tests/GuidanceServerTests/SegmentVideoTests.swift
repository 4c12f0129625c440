import Dispatch
import Foundation
import NIOCore
import RoadScene
import Synchronization
@testable import GuidanceServer
import TestSupport
import Testing

/// What the server makes of a segment's video with libavcodec, checked with ffprobe.
@Suite(.serialized) struct SegmentVideoTests {
    func probe(_ data: Data, suffix: String) async throws -> [String: String] {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString).\(suffix)")
        defer { try? FileManager.default.removeItem(at: file) }
        try data.write(to: file)
        let output = try await Command.executeAsync(
            "ffprobe",
            [
                "-v", "error", "-count_frames", "-select_streams", "v:0",
                "-show_entries", "stream=codec_name,width,height,nb_read_frames,pix_fmt", "-of", "default=noprint_wrappers=1", file.path
            ]
        ).stdout
        return Dictionary(
            output.split(separator: "\n").compactMap { line in
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

    /// Runs the ffmpeg CLI with `arguments` (output last) and returns the file it wrote.
    func made(_ suffix: String, _ arguments: [String]) async throws -> Data {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("made-\(UUID().uuidString).\(suffix)")
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try await Command.executeAsync("ffmpeg", ["-v", "error"] + arguments + ["-y", file.path])
        return try Data(contentsOf: file)
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func inspectionReadsWhatTheMP4SaysOfItselfAsFFprobeDoes() async throws {
        let clip = Data(await SampleSegment.clip())
        let info = try SegmentVideo.inspect(clip)
        let probed = try await probe(clip, suffix: "mp4")
        #expect(info == .init(streams: 1, videoStreams: 1, codec: "hevc", width: 128, height: 72, frames: 50, durationMs: 5000))
        #expect(probed["codec_name"] == info.codec && probed["nb_read_frames"] == "\(info.frames)")
    }

    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aSecondTrackAndOtherFormatsAreSeenForWhatTheyAre() async throws {
        let withSound = try await made(
            "mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=128x72:rate=10", "-f", "lavfi", "-i", "sine", "-t", "1",
                "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-c:a", "aac"
            ])
        let info = try SegmentVideo.inspect(withSound)
        #expect(info.streams == 2 && info.videoStreams == 1)
        // MPEG-TS, Matroska: formats FFmpeg reads, but a segment is MP4 and nothing else is probed.
        for (suffix, format) in [("ts", "mpegts"), ("mkv", "matroska")] {
            let other = try await made(
                suffix, ["-f", "lavfi", "-i", "testsrc2=size=128x72:rate=10", "-t", "1", "-c:v", "mpeg2video", "-f", format])
            #expect(throws: SegmentVideo.Failure.self, "\(format)") { _ = try SegmentVideo.inspect(other) }
            await #expect(throws: SegmentVideo.Failure.self, "\(format)") {
                _ = try await SegmentVideo.grayFrames(from: other, every: 1, maxWidth: 64, limit: 1)
            }
        }
    }

    /// A playlist that names another file and a URL: libavformat would open both if it probed the
    /// format; read as MP4 with no protocol allowed, it is only unreadable bytes.
    @Test func aPlaylistInsideASegmentOpensNothing() async throws {
        let secret = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString).ts")
        try Data("secret".utf8).write(to: secret)
        defer { try? FileManager.default.removeItem(at: secret) }
        let playlist = Data(
            "#EXTM3U\n#EXT-X-TARGETDURATION:5\n#EXTINF:5,\nfile://\(secret.path)\n#EXTINF:5,\nhttp://127.0.0.1:9/x.ts\n#EXT-X-ENDLIST\n"
                .utf8)
        #expect(throws: SegmentVideo.Failure.self) { _ = try SegmentVideo.inspect(playlist) }
        await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.grayFrames(from: playlist, every: 1, maxWidth: 64, limit: 1)
        }
        let concat = Data("ffconcat version 1.0\nfile '\(secret.path)'\n".utf8)
        #expect(throws: SegmentVideo.Failure.self) { _ = try SegmentVideo.inspect(concat) }
    }

    /// The size limit (4096x4096) is checked on what the container says; the decoder follows the
    /// stream's own parameter sets. A one-frame 8192x2176 H.264 clip whose track header and sample
    /// entry were made to say 640x360 once passed the check and was decoded at full size (an 8K
    /// HEVC frame took about 170 MB); now no frame over the limit's pixels is allocated.
    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func aStreamLargerThanItsContainerSaysIsNotDecoded() async throws {
        let large = try await made(
            "mp4",
            [
                "-f", "lavfi", "-i", "color=c=gray:size=8192x2176:rate=10", "-frames:v", "1",
                "-c:v", "libx264", "-preset", "ultrafast", "-movflags", "+faststart"
            ])
        var bytes = [UInt8](large)
        /// The offset of the first box of `type` (at its size field), moov coming first.
        func box(_ type: String) throws -> Int {
            let tag = Array(type.utf8)
            return try #require((4..<(bytes.count - 4)).first { Array(bytes[$0..<$0 + 4]) == tag }, "no \(type)") - 4
        }
        func put(_ value: Int, bytes count: Int, at offset: Int) {
            for i in 0..<count { bytes[offset + i] = UInt8((value >> (8 * (count - 1 - i))) & 0xff) }
        }
        // The sample entry (after stsd's header, version and count): width and height at 32.
        let entry = try box("stsd") + 16
        #expect(String(decoding: bytes[(entry + 4)..<(entry + 8)], as: UTF8.self) == "avc1")
        put(640, bytes: 2, at: entry + 32)
        put(360, bytes: 2, at: entry + 34)
        // The track header (version 0): width and height, 16.16 fixed point, at 76 into its body.
        let header = try box("tkhd")
        #expect(bytes[header + 8] == 0)
        put(640 << 16, bytes: 4, at: header + 8 + 76)
        put(360 << 16, bytes: 4, at: header + 8 + 80)
        let lying = Data(bytes)
        let info = try SegmentVideo.inspect(lying)
        #expect(info.width == 640 && info.height == 360 && info.frames == 1)
        await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.grayFrames(from: lying, every: 1, maxWidth: 64, limit: 1)
        }
        await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.keyframeJPEGs(from: lying, count: 2)
        }
    }

    /// A clip of one still frame a minute long, sampled with `frames`-based spacing, never holds
    /// more gray frames than asked: decoding stops at the limit.
    @Test(.enabled(if: SampleSegment.available, "needs ffmpeg with libx265"))
    func grayFramesStopAtTheLimitWhateverTheClipHolds() async throws {
        let clip = Data(await SampleSegment.clip())
        let frames = try await SegmentVideo.grayFrames(from: clip, every: 1, maxWidth: 64, limit: 4)
        #expect(frames.map(\.index) == [0, 1, 2, 3])
        let spread = try await SegmentVideo.grayFrames(from: clip, every: 12, maxWidth: 64, limit: 4)
        #expect(spread.map(\.index) == [0, 12, 24, 36])
    }

    /// Decode work queued behind others for a session that has since ended is dropped when its turn
    /// comes: a device that went away costs the pool nothing more.
    /// A segment's boxes are read in place up to 1 MiB and on the inspection pool above: the same
    /// answer either way, and the same refusal of what is not an MP4.
    @Test func aReceivedSegmentIsReadTheSameInPlaceAndOnThePool() async throws {
        let clip = await SampleSegment.clip(2)
        let small = Data(SampleSegment.tagged(clip, 1))
        let large = Data(SampleSegment.tagged(clip, 1, bytes: SegmentVideo.inPlaceBytes + 1))
        #expect(small.count <= SegmentVideo.inPlaceBytes && large.count > SegmentVideo.inPlaceBytes)
        let inPlace = try await SegmentVideo.inspectReceived(small)
        let onPool = try await SegmentVideo.inspectReceived(large)
        #expect(inPlace == onPool)
        #expect(inPlace.codec == "hevc" && inPlace.frames > 0, "\(inPlace)")
        for bytes in [Data(repeating: 7, count: 4096), Data(repeating: 7, count: SegmentVideo.inPlaceBytes + 1)] {
            await #expect(throws: SegmentVideo.Failure.self) { try await SegmentVideo.inspectReceived(bytes) }
        }
    }

    @Test func queuedWorkOfAnEndedSessionIsDropped() async throws {
        final class Seen: Sendable {
            let busy = Atomic<Int>(0)
            let ran = Atomic<Bool>(false)
        }
        let gate = DispatchSemaphore(value: 0)
        let seen = Seen()
        // Every pool thread held.
        let holders = (0..<System.coreCount).map { _ in
            Task {
                try await SegmentVideo.onPool(Data([1])) { _ in
                    seen.busy.add(1, ordering: .relaxed); gate.wait()
                }
            }
        }
        let allBusy = await eventually { seen.busy.load(ordering: .relaxed) == System.coreCount }
        #expect(allBusy)
        let queued = Task { try await SegmentVideo.onPool(Data([2])) { _ in seen.ran.store(true, ordering: .relaxed) } }
        queued.cancel()
        for _ in holders { gate.signal() }
        for holder in holders { try await holder.value }
        await #expect(throws: CancellationError.self) { try await queued.value }
        let didRun = seen.ran.load(ordering: .relaxed)
        #expect(!didRun)
    }

    /// A segment whose MP4 sample entry says 160x16 while its HEVC parameter sets say 4112x16
    /// (fuzz/regressions/segments, made with ffmpeg and two bytes changed): the size check before
    /// the decoder opens passed it, and frames 4112 wide were decoded, past the 4096x4096 limit.
    /// Every reader refuses it now.
    @Test func aFrameLargerThanTheLimitIsRefusedWhateverTheSampleEntrySays() async throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fuzz/regressions/segments/sps-4112-wide-entry-160.mp4")
        let segment = try Data(contentsOf: file)
        let info = try SegmentVideo.inspect(segment)
        #expect(info.codec == "hevc" && info.width == 160 && info.height == 16 && info.frames == 1)
        let error = await #expect(throws: SegmentVideo.Failure.self) {
            _ = try await SegmentVideo.grayFrames(from: segment, every: 1, maxWidth: 0, limit: 2)
        }
        #expect(error?.description.contains("cannot decode the segment") == true, "\(String(describing: error))")
        await #expect(throws: SegmentVideo.Failure.self) { _ = try await SegmentVideo.keyframeJPEGs(from: segment, count: 1) }
        await #expect(throws: SegmentVideo.Failure.self) { _ = try await SegmentVideo.h264(from: segment) }
    }
}
