import Foundation

/// A trip's track as an SVG drawing, pure: the points projected flat (longitude scaled by the
/// cosine of the middle latitude, so a square kilometre stays square), fitted to ``width`` with
/// a margin, north up. No map tiles: the shape of the drive, its start and its end.
struct TripDrawing: Equatable {
    static let width = 1000.0
    static let margin = 24.0

    /// `x,y x,y …`, for a `<polyline>`, at most `maxPoints` of them (evenly thinned, the last kept).
    var polyline: String
    var height: Double
    var start: (x: Double, y: Double)
    var end: (x: Double, y: Double)

    static func == (a: TripDrawing, b: TripDrawing) -> Bool {
        a.polyline == b.polyline && a.height == b.height && a.start == b.start && a.end == b.end
    }

    init?(_ points: [TrackPoint], maxPoints: Int = 2000) {
        guard let first = points.first, let last = points.last else { return nil }
        let step = max(1, (points.count + maxPoints - 1) / maxPoints)
        var drawn = stride(from: 0, to: points.count, by: step).map { points[$0] }
        if drawn.last != last { drawn.append(last) }
        let lats = drawn.map(\.lat), lons = drawn.map(\.lon)
        let (south, north, west, east) = (lats.min() ?? 0, lats.max() ?? 0, lons.min() ?? 0, lons.max() ?? 0)
        let scaleX = cos((south + north) / 2 * Double.pi / 180)
        let spanX = max((east - west) * scaleX, 1e-6), spanY = max(north - south, 1e-6)
        let inner = Self.width - 2 * Self.margin
        // The longer side fills the width; a trip that runs north-south is drawn at most square.
        let scale = min(inner / spanX, inner / spanY)
        height = (spanY * scale + 2 * Self.margin).rounded()
        func project(_ point: TrackPoint) -> (x: Double, y: Double) {
            let x = Self.margin + (inner - spanX * scale) / 2 + (point.lon - west) * scaleX * scale
            let y = Self.margin + (north - point.lat) * scale
            return ((x * 10).rounded() / 10, (y * 10).rounded() / 10)
        }
        polyline = drawn.map {
            let p = project($0); return "\(p.x),\(p.y)"
        }.joined(separator: " ")
        start = project(first)
        end = project(last)
    }
}
