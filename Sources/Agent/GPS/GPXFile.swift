public import Foundation
public import GuidanceProtocol
import UTC

/// A segment's GPS track as a GPX 1.1 file (https://www.topografix.com/GPX/1/1/), written beside
/// its MP4 (`000042-….gpx`): a track point a second with a position, its elevation, time and fix
/// (`2d`, `3d`); speed (m/s) and course (degrees) in Garmin's TrackPointExtension v2, which map
/// programs read. Seconds without a fix have no point (GPX needs a position); a segment recorded
/// with no fix at all has an empty track.
public enum GPXFile {
    public static let fileExtension = "gpx"

    public static func document(capturedAt: Date, track: [GPSPosition], name: String) -> String {
        var lines = [
            #"<?xml version="1.0" encoding="UTF-8"?>"#,
            #"<gpx version="1.1" creator="dashcam-agent" xmlns="http://www.topografix.com/GPX/1/1" "#
                + #"xmlns:gpxtpx="http://www.garmin.com/xmlschemas/TrackPointExtension/v2">"#,
            "  <metadata><time>\(UTCTime(capturedAt).rfc3339)</time></metadata>",
            "  <trk>",
            "    <name>\(escaped(name))</name>",
            "    <trkseg>"
        ]
        for point in track where point.hasPosition {
            guard let lat = point.lat, let lon = point.lon else { continue }
            var line = "      <trkpt lat=\"\(decimal(lat, 7))\" lon=\"\(decimal(lon, 7))\">"
            if let alt = point.alt { line += "<ele>\(decimal(alt, 2))</ele>" }
            line += "<time>\(escaped(point.t))</time><fix>\(point.mode >= 3 ? "3d" : "2d")</fix>"
            var extensions = ""
            if let speed = point.speed { extensions += "<gpxtpx:speed>\(decimal(speed, 3))</gpxtpx:speed>" }
            if let track = point.track { extensions += "<gpxtpx:course>\(decimal(track, 1))</gpxtpx:course>" }
            if !extensions.isEmpty {
                line += "<extensions><gpxtpx:TrackPointExtension>\(extensions)</gpxtpx:TrackPointExtension></extensions>"
            }
            lines.append(line + "</trkpt>")
        }
        lines += ["    </trkseg>", "  </trk>", "</gpx>", ""]
        return lines.joined(separator: "\n")
    }

    private static func decimal(_ value: Double, _ digits: Int) -> String {
        String(format: "%.\(digits)f", value)
    }

    private static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
