@testable import Agent
import GuidanceProtocol
import Foundation
import HAL
import Testing

/// The fixes kept for the segments, with the time passed in: a point a second, the newest of
/// each second, cut by wall-clock span, forgotten after ten minutes; and the GPX file made of them.
@Suite struct GPSTrackTests {
    static let t0 = Date(timeIntervalSince1970: 1_795_680_600)
    static func fix(_ mode: Int = 3, lat: Double = 37.5665, speed: Double = 13.89, at seconds: Double) -> GPSFix {
        GPSFix(
            mode: mode, time: t0.addingTimeInterval(seconds), lat: mode >= 2 ? lat : nil, lon: mode >= 2 ? 126.978 : nil,
            altitude: 53, speed: speed, track: 91.5)
    }

    @Test func aPointASecondCutBySpan() {
        var track = GPSTrack()
        for second in 0..<10 {
            // Two fixes in one second: the later one is the second's point.
            track.add(Self.fix(lat: 1, at: Double(second)), at: Self.t0.addingTimeInterval(Double(second) + 0.1))
            track.add(Self.fix(at: Double(second) + 0.5), at: Self.t0.addingTimeInterval(Double(second) + 0.6))
        }
        #expect(track.points.count == 10)
        let segment = track.points(from: Self.t0.addingTimeInterval(2), to: Self.t0.addingTimeInterval(7))
        #expect(segment.count == 5 && segment.allSatisfy { $0.lat == 37.5665 && $0.mode == 3 })
        #expect(segment.first?.t == "2026-11-26T08:10:02.500Z", "the receiver's time of the fix")
        #expect(track.current(now: Self.t0.addingTimeInterval(10))?.lat == 37.5665)
        #expect(track.current(now: Self.t0.addingTimeInterval(14)) == nil, "stale after 3 s")
    }

    @Test func noFixIsAPointWithoutPositionAndTheAgentsTime() {
        var track = GPSTrack()
        track.add(GPSFix(mode: 1), at: Self.t0)
        let point = track.points(from: Self.t0, to: Self.t0.addingTimeInterval(1)).first
        #expect(point == GPSPosition(t: "2026-11-26T08:10:00.000Z", mode: 1))
        // A 2D fix has no altitude.
        track.add(Self.fix(2, at: 1), at: Self.t0.addingTimeInterval(1))
        #expect(track.points.last?.point.alt == nil && track.points.last?.point.lat == 37.5665)
    }

    @Test func tenMinutesAreKeptAndAClockGoingBackStartsAfresh() {
        var track = GPSTrack()
        for second in 0..<700 { track.add(Self.fix(at: Double(second)), at: Self.t0.addingTimeInterval(Double(second))) }
        #expect(track.points.count == 601 && track.points.first?.at == Self.t0.addingTimeInterval(99))
        track.add(Self.fix(at: 800), at: Self.t0.addingTimeInterval(-3600))
        #expect(track.points.count == 1)
    }

    @Test func theGPXHasAPointForEachSecondWithAPosition() {
        let track = [
            GPSPosition(t: "2026-11-26T08:10:00.000Z", mode: 3, lat: 37.5665, lon: 126.978, alt: 53, speed: 13.89, track: 91.5),
            GPSPosition(t: "2026-11-26T08:10:01.000Z", mode: 1),
            GPSPosition(t: "2026-11-26T08:10:02.000Z", mode: 2, lat: 37.5666, lon: 126.9781, speed: 0)
        ]
        let gpx = GPXFile.document(capturedAt: Self.t0, track: track, name: "000042-20261126T081000.000Z.mp4")
        #expect(gpx.components(separatedBy: "<trkpt ").count == 3, "\(gpx)")
        #expect(
            gpx.contains(
                #"<trkpt lat="37.5665000" lon="126.9780000"><ele>53.00</ele><time>2026-11-26T08:10:00.000Z</time><fix>3d</fix>"#
                    + "<extensions><gpxtpx:TrackPointExtension><gpxtpx:speed>13.890</gpxtpx:speed><gpxtpx:course>91.5</gpxtpx:course></gpxtpx:TrackPointExtension></extensions></trkpt>"
            ), "\(gpx)")
        #expect(gpx.contains(#"<trkpt lat="37.5666000" lon="126.9781000"><time>2026-11-26T08:10:02.000Z</time><fix>2d</fix>"#), "\(gpx)")
        // gpsbabel reads these files in GPSSystemTests.
    }

    @Test func theMP4LocationIsISO6709() {
        #expect(GPSPosition(t: "", mode: 3, lat: 37.5665, lon: 126.978, alt: 35).iso6709 == "+37.5665+126.9780+035.000/")
        #expect(GPSPosition(t: "", mode: 2, lat: -33.8568, lon: -0.5, alt: nil).iso6709 == "-33.8568-000.5000/")
        #expect(GPSPosition(t: "", mode: 1, lat: 1, lon: 1).iso6709 == nil, "no fix, no location")
    }

    /// A segment leaves its segmenter with what the agent adds: the track over its span (and the
    /// first position as the MP4's location), where the clock's time comes from, and a step.
    @Test func aSegmentIsNotedWithItsTrackAndItsClock() throws {
        var settings = CapturePipeline.Settings(
            encoder: EncoderSettings(
                preference: ["libx265"], rateControl: .crf(28), format: VideoFormat(width: 320, height: 180, fps: 10),
                keyframeInterval: 10),
            segmentSeconds: 3,
            reopenBackoffMs: (100, 100), maxSegments: nil)
        let kept = GPSTrackStore()
        for second in 0..<5 { kept.add(Self.fix(at: Double(second)), at: Self.t0.addingTimeInterval(Double(second) - 1)) }
        settings.track = { kept.points(from: $0, to: $1) }
        settings.clockSource = { "gps" }
        let metadata = SegmentMetadata(
            seq: 42, capturedAt: Self.t0, captureStartMonotonicNs: 0, durationMs: 3000, frames: 30, droppedFrames: 0,
            bytes: 1, sha256: "", encoder: "libx265", width: 320, height: 180, fps: 10, complete: true, endReason: .complete)
        let segment = settings.noted(EncodedSegment(metadata: metadata, data: [1], clockStepSeconds: -3600))
        // Fixes that came at t0 - 1 ..< t0 + 4: the ones within the segment's 3 s.
        #expect(segment.notes.gps?.count == 3)
        #expect(segment.notes.clock?.source == "gps" && segment.notes.clock?.steppedSeconds == -3600)
        #expect(segment.metadata == metadata && segment.data == [1])
        #expect(settings.location?(Self.t0, Self.t0.addingTimeInterval(3)) == "+37.5665+126.9780+053.000/")
        settings.track = nil
        #expect(settings.noted(EncodedSegment(metadata: metadata, data: [])).notes.gps == nil)
        #expect(settings.location == nil)
    }
}
