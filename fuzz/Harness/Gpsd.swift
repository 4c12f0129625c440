import GuidanceProtocol
import HAL

/// What a gpsd (or anything listening on its port) sends the agent: the stream cut into lines
/// (at a place the input's first byte picks, so lines are split across reads), each line read as
/// gpsd's JSON, and every number of a fix checked to be in range before the agent uses it, as is
/// the MP4 location made of it.
enum Gpsd {
    static func run(_ input: UnsafeRawBufferPointer) {
        guard let first = input.first else { return }
        let bytes = Array(input.dropFirst())
        let cut = min(bytes.count, Int(first) * 64)
        var reader = GpsdLineReader()
        let lines = reader.append(bytes[..<cut]) + reader.append(bytes[cut...])
        for line in lines {
            require(
                line.count <= GpsdLineReader.maxLine && !line.contains(UInt8(ascii: "\n")),
                "a line of \(line.count) bytes, or with a newline")
            guard case .fix(let fix)? = GpsdReport.parse(line) else { continue }
            require((0...3).contains(fix.mode), "mode \(fix.mode)")
            func within(_ value: Double?, _ range: ClosedRange<Double>) -> Bool { value.map { $0.isFinite && range.contains($0) } ?? true }
            require(
                within(fix.lat, -90...90) && within(fix.lon, -180...180) && within(fix.speed, 0...1000)
                    && within(fix.altitude, -1000...100_000) && within(fix.track, 0...359.999_999_999), "a fix out of range: \(fix)")
            // The MP4's location (ISO 6709) made from it, as the segmenter makes it.
            let point = GPSPosition(
                t: "", mode: fix.mode, lat: fix.lat, lon: fix.lon, alt: fix.altitude, speed: fix.speed, track: fix.track)
            if let location = point.iso6709 { require(location.utf8.count <= 40 && location.hasSuffix("/"), "location \(location)") }
        }
    }
}
