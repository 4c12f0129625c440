public import Foundation

/// What a GPS receiver said at one moment, as gpsd reports it (a `TPV`): every value checked to be
/// a number in range, or absent.
public struct GPSFix: Sendable, Equatable {
    /// gpsd's fix mode: 0 not seen yet, 1 no fix, 2 a 2D fix, 3 a 3D fix.
    public var mode: Int
    /// The receiver's time of the fix (UTC), if it gave one.
    public var time: Date?
    public var lat: Double?
    public var lon: Double?
    /// Metres above the ellipsoid (`altHAE`), else above sea level (`alt`/`altMSL`).
    public var altitude: Double?
    /// Metres a second over the ground.
    public var speed: Double?
    /// Degrees from true north, 0 ≤ track < 360.
    public var track: Double?

    public init(
        mode: Int, time: Date? = nil, lat: Double? = nil, lon: Double? = nil, altitude: Double? = nil,
        speed: Double? = nil, track: Double? = nil
    ) {
        self.mode = mode
        self.time = time
        self.lat = lat
        self.lon = lon
        self.altitude = altitude
        self.speed = speed
        self.track = track
    }

    /// A position to show: a 2D or 3D fix with latitude and longitude.
    public var hasPosition: Bool { mode >= 2 && lat != nil && lon != nil }

    /// `no fix`, `2d`, `3d` (`unknown` before the receiver said anything).
    public var modeName: String {
        switch mode {
        case 2: "2d"
        case 3: "3d"
        case 1: "no fix"
        default: "unknown"
        }
    }
}
