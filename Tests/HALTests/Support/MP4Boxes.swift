/// Reads the ISO BMFF boxes of an MP4 the way the spec lays them out (ISO/IEC 14496-12), so a
/// test can check what a muxer wrote byte for byte, without trusting the muxer's own reader.
struct MP4Boxes {
    struct Failure: Error, CustomStringConvertible { let description: String }

    struct Box {
        var type: String
        /// The box's payload (after its header), as offsets into the file.
        var payload: Range<Int>
    }

    let bytes: [UInt8]

    /// The boxes directly inside `range` (the whole file: the top level).
    func children(of range: Range<Int>? = nil) throws -> [Box] {
        var offset = range?.lowerBound ?? 0
        let end = range?.upperBound ?? bytes.count
        var boxes: [Box] = []
        while offset < end {
            guard end - offset >= 8 else { throw Failure(description: "truncated box header at \(offset)") }
            var size = Int(uint32(at: offset))
            let type = String(decoding: bytes[offset + 4..<offset + 8], as: UTF8.self)
            var header = 8
            if size == 1 {
                size = Int(uint32(at: offset + 8)) << 32 | Int(uint32(at: offset + 12))
                header = 16
            } else if size == 0 {
                size = end - offset
            }
            guard size >= header, offset + size <= end else { throw Failure(description: "\(type) at \(offset) overruns its parent") }
            boxes.append(Box(type: type, payload: offset + header..<offset + size))
            offset += size
        }
        return boxes
    }

    /// The first box along `path`, e.g. `["moov", "trak", "mdia", "minf", "stbl", "stsz"]`.
    func box(_ path: [String]) throws -> Box {
        var range: Range<Int>? = nil
        var found: Box?
        for (depth, type) in path.enumerated() {
            var payload = range
            // Sample entries carry fixed fields before their child boxes.
            if depth > 0, path[depth - 1] == "stsd" { payload = payload.map { $0.lowerBound + 8..<$0.upperBound } }
            if depth > 0, path[depth - 1] == "hvc1" { payload = payload.map { $0.lowerBound + 78..<$0.upperBound } }
            guard let next = try children(of: payload).first(where: { $0.type == type }) else {
                throw Failure(description: "no \(path[...depth].joined(separator: "/"))")
            }
            found = next
            range = next.payload
        }
        return found!
    }

    /// Sample sizes from `stsz`.
    func sampleSizes() throws -> [Int] {
        let stsz = try box(Self.stbl + ["stsz"]).payload
        let fixed = Int(uint32(at: stsz.lowerBound + 4)), count = Int(uint32(at: stsz.lowerBound + 8))
        if fixed != 0 { return Array(repeating: fixed, count: count) }
        return (0..<count).map { Int(uint32(at: stsz.lowerBound + 12 + 4 * $0)) }
    }

    /// 1-based numbers of the sync samples (`stss`); every sample when there is no `stss`.
    func syncSamples() throws -> [Int] {
        guard let stss = try children(of: try box(Self.stbl).payload).first(where: { $0.type == "stss" })?.payload else {
            return Array(1...(try sampleSizes().count))
        }
        let count = Int(uint32(at: stss.lowerBound + 4))
        return (0..<count).map { Int(uint32(at: stss.lowerBound + 8 + 4 * $0)) }
    }

    /// Each sample's duration from `stts`, in frame periods of `fps` (exact for the rates tested).
    func sampleDurations(fps: Int) throws -> [Double] {
        let mdhd = try box(["moov", "trak", "mdia", "mdhd"]).payload
        let version = bytes[mdhd.lowerBound]
        let timescale = Double(uint32(at: mdhd.lowerBound + (version == 1 ? 20 : 12)))
        let stts = try box(Self.stbl + ["stts"]).payload
        let entries = Int(uint32(at: stts.lowerBound + 4))
        return (0..<entries).flatMap { entry -> [Double] in
            let base = stts.lowerBound + 8 + 8 * entry
            return Array(repeating: Double(uint32(at: base + 4)) * Double(fps) / timescale, count: Int(uint32(at: base)))
        }
    }

    /// The `hvcC` record of the sample description.
    func hevcConfiguration() throws -> [UInt8] {
        Array(bytes[try box(Self.stbl + ["stsd", "hvc1", "hvcC"]).payload])
    }

    /// Width and height in the `hvc1` sample entry.
    func sampleEntrySize() throws -> (width: Int, height: Int) {
        let entry = try box(Self.stbl + ["stsd", "hvc1"]).payload.lowerBound
        return (Int(uint16(at: entry + 24)), Int(uint16(at: entry + 26)))
    }

    static let stbl = ["moov", "trak", "mdia", "minf", "stbl"]

    private func uint32(at offset: Int) -> UInt32 {
        bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    private func uint16(at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }
}
