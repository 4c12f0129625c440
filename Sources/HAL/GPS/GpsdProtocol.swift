import Foundation
import UTC

/// gpsd's JSON protocol, as a client reads it: one JSON object per line, each with a `class`
/// (https://gpsd.gitlab.io/gpsd/gpsd_json.html). The same on gpsd 3.22 and 3.25; only what a
/// dashcam needs is read, the rest is named and passed over.
public enum GpsdReport: Sendable, Equatable {
    /// The first line gpsd sends.
    case version(release: String, protoMajor: Int, protoMinor: Int)
    /// The receivers gpsd knows of.
    case devices(Int)
    case watch(enabled: Bool)
    /// Time, position, velocity.
    case fix(GPSFix)
    case error(String)
    /// Another class (`SKY`, `PPS`, `TOFF`, …).
    case other(String)

    /// What a client sends to be told of every fix, in JSON.
    public static let watchCommand = #"?WATCH={"enable":true,"json":true};"# + "\n"

    /// One line (without its newline); nil when it is not a JSON object with a `class`.
    public static func parse(_ line: some Collection<UInt8>) -> GpsdReport? {
        guard line.count <= GpsdLineReader.maxLine, let report = try? JSONDecoder().decode(Report.self, from: Data(line)) else {
            return nil
        }
        return report.value
    }

    /// Each field read on its own: one of the wrong type or out of range is left out, the rest kept.
    private struct Report: Decodable {
        var value: GpsdReport

        enum Key: String, CodingKey {
            case kind = "class", release, proto_major, proto_minor, devices, enable, message
            case mode, time, lat, lon, altHAE, alt, altMSL, speed, track
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Key.self)
            let kind = try c.decode(String.self, forKey: .kind)
            func number(_ key: Key, in range: ClosedRange<Double>) -> Double? {
                (try? c.decodeIfPresent(Double.self, forKey: key)).flatMap { $0 }.flatMap { $0.isFinite && range.contains($0) ? $0 : nil }
            }
            func integer(_ key: Key) -> Int? {
                number(key, in: -1e9...1e9).flatMap { $0 == $0.rounded() ? Int($0) : nil }
            }
            func text(_ key: Key) -> String? { (try? c.decodeIfPresent(String.self, forKey: key)).flatMap { $0 } }
            switch kind {
            case "VERSION":
                value = .version(
                    release: String((text(.release) ?? "?").prefix(32)), protoMajor: integer(.proto_major) ?? 0,
                    protoMinor: integer(.proto_minor) ?? 0)
            case "DEVICES":
                struct Device: Decodable {}
                value = .devices((try? c.decodeIfPresent([Device].self, forKey: .devices)).flatMap { $0 }?.count ?? 0)
            case "WATCH":
                value = .watch(enabled: (try? c.decodeIfPresent(Bool.self, forKey: .enable)).flatMap { $0 } ?? false)
            case "ERROR":
                value = .error(String((text(.message) ?? "").prefix(200)))
            case "TPV":
                let mode = integer(.mode).flatMap { (0...3).contains($0) ? $0 : nil } ?? 0
                var fix = GPSFix(mode: mode, time: text(.time).flatMap { Date(rfc3339: $0) })
                fix.lat = number(.lat, in: -90...90)
                fix.lon = number(.lon, in: -180...180)
                fix.altitude =
                    number(.altHAE, in: -1000...100_000) ?? number(.alt, in: -1000...100_000) ?? number(.altMSL, in: -1000...100_000)
                fix.speed = number(.speed, in: 0...1000)
                fix.track = number(.track, in: 0...360).map { $0 == 360 ? 0 : $0 }
                value = .fix(fix)
            default:
                value = .other(String(kind.prefix(32)))
            }
        }
    }
}

/// Cuts gpsd's stream into lines, each at most ``maxLine`` bytes: a longer one (gpsd's are a few
/// hundred bytes; a `SKY` with many satellites a few thousand) is dropped whole and counted,
/// so a peer cannot make the buffer grow.
public struct GpsdLineReader: Sendable {
    public static let maxLine = 16 * 1024

    private var pending: [UInt8] = []
    /// The line being dropped runs on until the next newline.
    private var discarding = false
    public private(set) var dropped = 0

    public init() {}

    /// The whole lines `bytes` completes, in order, without their `\n` (or `\r\n`).
    public mutating func append(_ bytes: some Collection<UInt8>) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                if discarding {
                    discarding = false
                } else {
                    if pending.last == UInt8(ascii: "\r") { pending.removeLast() }
                    lines.append(pending)
                }
                pending.removeAll(keepingCapacity: true)
            } else if !discarding {
                pending.append(byte)
                if pending.count > Self.maxLine {
                    pending.removeAll()
                    discarding = true
                    dropped += 1
                }
            }
        }
        return lines
    }
}
