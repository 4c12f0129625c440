import Foundation
import HAL
import Testing

/// A ``VideoEncoder`` without a codec: each frame becomes a packet whose bytes name its slot, handed
/// over `delay` frames late as an encoder with lookahead does, and a restart starts a stream with
/// other parameter sets.
final class FakeEncoder: VideoEncoder {
    let name = "fake"
    let encoderPixelFormat = PixelFormat.yuv420p
    private(set) var stream: EncodedStream
    private let delay: Int
    private var pending: [(bytes: [UInt8], slot: Int64, keyframe: Bool)] = []
    private var generation: UInt8 = 0
    /// Every packet handed over, in order.
    private(set) var sent: [(bytes: [UInt8], slot: Int64, keyframe: Bool)] = []

    init(format: VideoFormat, delay: Int = 0) {
        self.delay = delay
        self.stream = EncodedStream(format: format, parameterSets: Self.parameterSets(generation: 0))
    }

    func encode(_ frame: Frame, slot: Int64, keyframe: Bool, into sink: PacketSink) throws {
        pending.append((Self.packet(slot: slot, generation: generation), slot, keyframe))
        while pending.count > delay { try send(pending.removeFirst(), to: sink) }
    }

    func flush(into sink: PacketSink) throws {
        while !pending.isEmpty { try send(pending.removeFirst(), to: sink) }
    }

    func restart() throws {
        generation += 1
        stream.parameterSets = Self.parameterSets(generation: generation)
    }

    private func send(_ packet: (bytes: [UInt8], slot: Int64, keyframe: Bool), to sink: PacketSink) throws {
        sent.append(packet)
        try packet.bytes.withUnsafeBytes { bytes in
            try sink(EncodedPacket(bytes: bytes, pts: packet.slot, dts: packet.slot, isKeyframe: packet.keyframe))
        }
    }

    /// A length-prefixed NAL unit of varying size that says which slot it is.
    static func packet(slot: Int64, generation: UInt8) -> [UInt8] {
        let payload =
            [0x26, 0x01, generation] + withUnsafeBytes(of: slot.bigEndian, Array.init)
            + Array(repeating: UInt8(truncatingIfNeeded: slot), count: Int(slot % 7) * 100)
        return withUnsafeBytes(of: UInt32(payload.count).bigEndian, Array.init) + payload
    }

    /// An `hvcC` record with the VPS, SPS and PPS libx265 wrote for 320x180 (Main, 8 bit), at a
    /// level that differs by `generation`: 2 (60), 3 (90), 3.1 (93), 4 (120). Real parameter sets,
    /// because FFmpeg 7.1's MP4 muxer rebuilds an `hvcC` from the ones it holds (FFmpeg 5.1 copies it).
    static func parameterSets(generation: UInt8) -> [UInt8] {
        let level: UInt8 = [60, 90, 93, 120][Int(generation) % 4]
        let profileTierLevel: [UInt8] = [0x04, 0x08, 0x00, 0x00, 0x03, 0x00, 0x9E, 0x08, 0x00, 0x00, 0x03, 0x00, 0x00, level]
        let vps: [UInt8] = [0x40, 0x01, 0x0C, 0x01, 0xFF, 0xFF] + profileTierLevel + [0x95, 0x98, 0x09]
        let sps: [UInt8] =
            [0x42, 0x01, 0x01] + profileTierLevel + [
                0x90, 0x01, 0x41, 0x01, 0x73, 0xE5, 0xCB, 0x2B, 0x34, 0x92, 0x65, 0x78, 0x0B, 0x70, 0x20, 0x20,
                0x00, 0x40, 0x00, 0x00, 0x03, 0x00, 0x40, 0x00, 0x00, 0x03, 0x02, 0x82, 0xA2
            ]
        let pps: [UInt8] = [0x44, 0x01, 0xC1, 0x72, 0x86, 0x0C, 0x46, 0x24]
        let header: [UInt8] = [
            0x01, 0x04, 0x08, 0x00, 0x00, 0x00, 0x9E, 0x08, 0x00, 0x00, 0x00, 0x00, level, 0xF0, 0x00,
            0xFC, 0xFF, 0xF8, 0xF8, 0x00, 0x00, 0x0F
        ]
        func array(_ type: UInt8, _ nal: [UInt8]) -> [UInt8] {
            [0x80 | type, 0x00, 0x01, UInt8(nal.count >> 8), UInt8(nal.count & 0xFF)] + nal
        }
        return header + [3] + array(32, vps) + array(33, sps) + array(34, pps)
    }
}

/// The segmenter's cuts and MP4s, fed by ``FakeEncoder``; the MP4s are read box by box.
@Suite struct SegmenterPacketTests {
    let format = VideoFormat(width: 320, height: 180, fps: 10)
    let start: UInt64 = 3_000_000_000

    func frame(_ n: Int) -> Frame {
        Frame(
            planes: (nil, nil, nil, nil), strides: (0, 0, 0, 0), pixelFormat: .yuv420p, width: format.width,
            height: format.height, timestamp: start + UInt64(n) * 100_000_000, sequence: UInt64(n))
    }

    /// Feeds frames `0..<count` except `missing` through `encoder`; closes early with `reason`.
    func record(_ count: Int, missing: Set<Int> = [], encoder: FakeEncoder, closeWith reason: SegmentEndReason? = nil)
        throws -> [EncodedSegment]
    {
        let segmenter = Segmenter(format: format, segmentSeconds: 5, firstSeq: 7)
        for n in 0..<count where !missing.contains(n) {
            let placement = try #require(segmenter.place(frame(n)))
            try encoder.encode(frame(n), slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
        }
        if let reason {
            try encoder.flush(into: segmenter)
            try segmenter.close(reason: reason)
        }
        return segmenter.takeClosed()
    }

    /// The packets of `slots`, concatenated as the muxer should have laid them out in `mdat`.
    func payload(_ encoder: FakeEncoder, _ slots: Range<Int64>) -> [UInt8] {
        encoder.sent.filter { slots.contains($0.slot) }.flatMap(\.bytes)
    }

    @Test func packetsLandInTheirSegmentByteForByteWithOneSyncSampleAndMoovFirst() throws {
        let encoder = FakeEncoder(format: format)
        let segments = try record(100, encoder: encoder)
        #expect(segments.map(\.metadata.seq) == [7, 8])
        for (index, segment) in segments.enumerated() {
            let mp4 = MP4Boxes(bytes: segment.data)
            let top = try mp4.children().map(\.type)
            #expect(top.first == "ftyp")
            let moov = try #require(top.firstIndex(of: "moov")), mdat = try #require(top.firstIndex(of: "mdat"))
            #expect(moov < mdat)
            let slots = Int64(index * 50)..<Int64(index * 50 + 50)
            #expect(try mp4.sampleSizes() == encoder.sent.filter { slots.contains($0.slot) }.map(\.bytes.count))
            #expect(Array(segment.data[try mp4.box(["mdat"]).payload]) == payload(encoder, slots))
            #expect(try mp4.syncSamples() == [1])
            #expect(try mp4.sampleDurations(fps: 10).reduce(0, +) == 50)
            #expect(try mp4.hevcConfiguration() == encoder.stream.parameterSets)
            let size = try mp4.sampleEntrySize()
            #expect(size.width == 320 && size.height == 180)
            let m = segment.metadata
            #expect(m.frames == 50 && m.droppedFrames == 0 && m.complete && m.endReason == .complete)
            #expect(m.durationMs == 5000 && m.encoder == "fake")
            #expect(m.bytes == segment.data.count)
            #expect(m.sha256 == (try sha256sum(segment.data)))
            #expect(m.captureStartMonotonicNs == start + UInt64(index) * 5_000_000_000)
        }
    }

    @Test func aLateEncoderStillClosesEachSegmentOnItsLastSlotAndAFlushDeliversTheRest() throws {
        let encoder = FakeEncoder(format: format, delay: 3)
        // 52 frames in: slots 0...48 have come out, so the first segment is still open.
        #expect(try record(52, encoder: encoder).isEmpty)

        let encoder2 = FakeEncoder(format: format, delay: 3)
        let segments = try record(64, encoder: encoder2, closeWith: .shutdown)
        #expect(segments.map(\.metadata.frames) == [50, 14])
        #expect(segments[1].metadata.endReason == .shutdown && segments[1].metadata.durationMs == 1400)
        let second = MP4Boxes(bytes: segments[1].data)
        #expect(Array(segments[1].data[try second.box(["mdat"]).payload]) == payload(encoder2, 50..<64))
        #expect(try second.syncSamples() == [1])
    }

    @Test func droppedSlotsStretchTheSampleBeforeThemAndALostLastSlotClosesOnTheNextSegment() throws {
        let encoder = FakeEncoder(format: format)
        let segments = try record(60, missing: [7, 8, 9, 49, 50], encoder: encoder, closeWith: .cameraLost)
        #expect(segments.count == 2)
        let first = segments[0].metadata, second = segments[1].metadata
        #expect(first.frames == 46 && first.droppedFrames == 4 && !first.complete && first.endReason == .complete)
        #expect(first.durationMs == 4900)
        // Slot 50 was dropped: the second segment starts at slot 51.
        #expect(second.frames == 9 && second.droppedFrames == 1 && second.endReason == .cameraLost)
        #expect(second.captureStartMonotonicNs == start + 5_000_000_000)
        let durations = try MP4Boxes(bytes: segments[0].data).sampleDurations(fps: 10)
        #expect(durations.count == 46)
        #expect(durations[6] == 4)  // slot 6 lasts until slot 10
        #expect(durations.reduce(0, +) == 49)
        let secondMP4 = MP4Boxes(bytes: segments[1].data)
        #expect(try secondMP4.sampleSizes().count == 9)
        #expect(Array(segments[1].data[try secondMP4.box(["mdat"]).payload]) == payload(encoder, 51..<60))
    }

    @Test func aRestartedEncodersNewParameterSetsGoIntoTheNextSegmentOnly() throws {
        let encoder = FakeEncoder(format: format)
        let segmenter = Segmenter(format: format, segmentSeconds: 5)
        let before = encoder.stream.parameterSets
        for n in 0..<20 {
            let placement = try #require(segmenter.place(frame(n)))
            try encoder.encode(frame(n), slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
        }
        try encoder.flush(into: segmenter)
        try segmenter.close(reason: .cameraLost)
        try encoder.restart()
        segmenter.restartTimeline()
        for n in 100..<110 {
            let placement = try #require(segmenter.place(frame(n)))
            try encoder.encode(frame(n), slot: placement.slot, keyframe: placement.startsSegment, into: segmenter)
        }
        try encoder.flush(into: segmenter)
        try segmenter.close(reason: .shutdown)
        let segments = segmenter.takeClosed()
        #expect(segments.map(\.metadata.frames) == [20, 10])
        #expect(try MP4Boxes(bytes: segments[0].data).hevcConfiguration() == before)
        #expect(try MP4Boxes(bytes: segments[1].data).hevcConfiguration() == encoder.stream.parameterSets)
        #expect(before != encoder.stream.parameterSets)
        // The new timeline starts at the reopened source's first frame.
        #expect(segments[1].metadata.captureStartMonotonicNs == start + 10_000_000_000)
    }

    /// SHA-256 by coreutils, not by the library the segmenter uses.
    func sha256sum(_ bytes: [UInt8]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(bytes))
        try input.fileHandleForWriting.close()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return String(text.prefix(64))
    }
}
