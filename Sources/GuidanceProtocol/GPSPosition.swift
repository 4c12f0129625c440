import Foundation

/// One second of a car's GPS track, as the agent keeps it (each segment's JSON line and GPX file)
/// and sends it (segment headers and clips): the fix it had then. `mode` is gpsd's (0 not seen,
/// 1 no fix, 2 2D, 3 3D); speed in m/s, track in degrees from true north, altitude in metres.
public struct GPSPosition: Codable, Sendable, Equatable {
    /// The receiver's time of the fix, else the agent's clock when it came (RFC 3339, ms).
    public var t: String
    public var mode: Int
    public var lat: Double?
    public var lon: Double?
    public var alt: Double?
    public var speed: Double?
    public var track: Double?

    public init(
        t: String, mode: Int, lat: Double? = nil, lon: Double? = nil, alt: Double? = nil, speed: Double? = nil, track: Double? = nil
    ) {
        self.t = t
        self.mode = mode
        self.lat = lat
        self.lon = lon
        self.alt = alt
        self.speed = speed
        self.track = track
    }

    /// A position to show: a 2D or 3D fix with latitude and longitude.
    public var hasPosition: Bool { mode >= 2 && lat != nil && lon != nil }

    /// Every number in range: what a server may compute with.
    public var isValid: Bool {
        func within(_ value: Double?, _ range: ClosedRange<Double>) -> Bool {
            value.map { $0.isFinite && range.contains($0) } ?? true
        }
        return (0...3).contains(mode) && t.utf8.count <= 40 && within(lat, -90...90) && within(lon, -180...180)
            && within(alt, -1000...100_000) && within(speed, 0...1000) && within(track, 0...360)
    }

    /// ISO 6709, as MP4's `©xyz` location holds it: `+37.5665+126.9780+035.000/`.
    public var iso6709: String? {
        guard hasPosition, let lat, let lon else { return nil }
        var text = Self.signed(lat, integer: 2, fraction: 4) + Self.signed(lon, integer: 3, fraction: 4)
        if let alt { text += Self.signed(alt, integer: 3, fraction: 3) }
        return text + "/"
    }

    private static func signed(_ value: Double, integer: Int, fraction: Int) -> String {
        let magnitude = String(format: "%0\(integer + fraction + 1).\(fraction)f", abs(value))
        return (value < 0 ? "-" : "+") + magnitude
    }
}
