import Foundation
import HAL
import TestSupport
import Testing

/// A webcam's MJPEG through libavcodec: a JPEG made by the ffmpeg CLI decodes to the picture
/// ffmpeg itself decodes; what is not a JPEG of the stream's size is refused and counted.
@Suite struct MJPEGDecoderTests {
    func jpeg(width: Int, height: Int) throws -> Data {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("frame-\(UUID().uuidString).jpg")
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try Command.run(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=\(width)x\(height)", "-frames:v", "1",
                "-pix_fmt", "yuvj422p", "-f", "mjpeg", "-y", file.path
            ])
        return try Data(contentsOf: file)
    }

    /// ffmpeg's own decode of the same JPEG, as yuv420p, luma plane only.
    func reference(_ data: Data, width: Int, height: Int) throws -> [UInt8] {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ref-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try data.write(to: folder.appendingPathComponent("in.jpg"))
        _ = try Command.run(
            "ffmpeg",
            [
                "-v", "error", "-i", folder.appendingPathComponent("in.jpg").path, "-pix_fmt", "yuv420p",
                "-f", "rawvideo", "-y", folder.appendingPathComponent("out.yuv").path
            ])
        return Array(try Data(contentsOf: folder.appendingPathComponent("out.yuv")).prefix(width * height))
    }

    @Test func aWebcamJPEGDecodesToThePictureFFmpegSees() throws {
        let data = try jpeg(width: 320, height: 240)
        let decoder = try MJPEGDecoder(width: 320, height: 240)
        let frame = try data.withUnsafeBytes { try #require(decoder.decode($0, timestamp: 42, sequence: 7)) }
        #expect((frame.width, frame.height, frame.pixelFormat, frame.timestamp, frame.sequence) == (320, 240, .yuv420p, 42, 7))
        let expected = try reference(data, width: 320, height: 240)
        let y = try #require(frame.planes.0)
        var difference = 0
        for row in 0..<240 {
            for col in 0..<320 { difference += abs(Int(y[row * Int(frame.strides.0) + col]) - Int(expected[row * 320 + col])) }
        }
        #expect(Double(difference) / Double(320 * 240) < 1.0, "mean luma difference \(Double(difference) / Double(320 * 240))")
        #expect(decoder.refused == 0)
    }

    @Test func whatIsNoJPEGOfTheStreamsSizeIsRefusedAndCounted() throws {
        let decoder = try MJPEGDecoder(width: 320, height: 240)
        let noise = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 7) })
        #expect(noise.withUnsafeBytes { decoder.decode($0, timestamp: 0, sequence: 0) } == nil)
        #expect(Data().withUnsafeBytes { decoder.decode($0, timestamp: 0, sequence: 0) } == nil)
        let other = try jpeg(width: 160, height: 120)
        #expect(other.withUnsafeBytes { decoder.decode($0, timestamp: 0, sequence: 0) } == nil)
        #expect(decoder.refused == 3)
        #expect(decoder.lastProblem == "a 160x120 picture in a 320x240 stream")
        // The stream goes on: the next good frame decodes.
        let good = try jpeg(width: 320, height: 240)
        #expect(good.withUnsafeBytes { decoder.decode($0, timestamp: 1, sequence: 1) } != nil)
    }
}
