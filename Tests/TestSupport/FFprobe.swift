public import Foundation

/// What ffprobe says about one MP4 segment: every claim a test makes about a segment is checked
/// here, by a tool that is not ours.
public struct ProbedSegment: Sendable {
    public var codec: String
    public var tag: String
    public var duration: Double
    public var frames: Int
    /// `key_frame` of every frame, in order.
    public var keyFrames: [Bool]
    /// Top-level boxes in file order, as ffprobe's MP4 demuxer reads them.
    public var topLevelBoxes: [String]
    /// NAL unit type of the first picture in the first packet (HEVC 19, 20: IDR; H.264 5: IDR).
    public var firstPictureNALType: Int?

    public var keyframeCount: Int { keyFrames.filter { $0 }.count }
    public var moovBeforeMdat: Bool {
        guard let moov = topLevelBoxes.firstIndex(of: "moov"), let mdat = topLevelBoxes.firstIndex(of: "mdat") else { return false }
        return moov < mdat
    }
    public var startsWithIDR: Bool {
        codec == "h264" ? firstPictureNALType == 5 : firstPictureNALType == 19 || firstPictureNALType == 20
    }
}

public enum FFprobe {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public static func probe(_ file: URL) throws -> ProbedSegment {
        let json = try run([
            "-v", "error", "-count_frames", "-select_streams", "v:0",
            "-show_entries", "stream=codec_name,codec_tag_string,nb_read_frames,duration:frame=key_frame",
            "-of", "json", file.path
        ]).stdout
        struct Output: Decodable {
            struct Stream: Decodable {
                var codec_name: String
                var codec_tag_string: String
                var nb_read_frames: String
                var duration: String
            }
            struct Frame: Decodable { var key_frame: Int }
            var streams: [Stream]
            var frames: [Frame]
        }
        let output = try JSONDecoder().decode(Output.self, from: Data(json.utf8))
        guard let stream = output.streams.first else { throw Failure(description: "\(file.path): no video stream") }

        // ffprobe's trace log names each box as the demuxer walks the file.
        let trace = try run(["-v", "trace", "-i", file.path]).stderr
        let boxes = trace.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("parent:'root'"), let start = line.range(of: "type:'") else { return nil }
            return String(line[start.upperBound...].prefix(4))
        }

        let packet = try run([
            "-v", "error", "-select_streams", "v:0", "-read_intervals", "%+#1",
            "-show_entries", "packet=data", "-show_data", file.path
        ]).stdout
        return ProbedSegment(
            codec: stream.codec_name, tag: stream.codec_tag_string,
            duration: Double(stream.duration) ?? -1, frames: Int(stream.nb_read_frames) ?? -1,
            keyFrames: output.frames.map { $0.key_frame == 1 }, topLevelBoxes: boxes,
            firstPictureNALType: firstPictureNALType(hexDump: packet, h264: stream.codec_name == "h264"))
    }

    /// Walks the length-prefixed NAL units of ffprobe's hex dump of the first packet and returns
    /// the type of the first picture (VCL) NAL: HEVC's types 0–31, H.264's 1–5.
    static func firstPictureNALType(hexDump: String, h264: Bool = false) -> Int? {
        var bytes: [UInt8] = []
        // Lines look like `00000000: 0000 0648 2801 adc6 ...  ...H(...`: offset, 8 groups of hex, text.
        for line in hexDump.split(separator: "\n") where line.count > 10 && line.dropFirst(8).hasPrefix(": ") {
            let hex = line.dropFirst(10).prefix(39).replacingOccurrences(of: " ", with: "")
            var index = hex.startIndex
            while let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex), next <= hex.endIndex, index < hex.endIndex {
                if let byte = UInt8(hex[index..<next], radix: 16) { bytes.append(byte) }
                index = next
            }
        }
        var offset = 0
        while offset + 5 <= bytes.count {
            let length = bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            if h264 {
                let type = Int(bytes[offset + 4]) & 0x1f
                if (1...5).contains(type) { return type }
            } else {
                let type = Int(bytes[offset + 4] >> 1) & 0x3f
                if type < 32 { return type }
            }
            offset += 4 + length
        }
        return nil
    }

    public static func run(_ arguments: [String], tool: String = "ffprobe") throws -> (stdout: String, stderr: String) {
        try Command.run(tool, arguments)
    }
}
