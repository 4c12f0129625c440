import Foundation
public import GuidanceProtocol
public import HAL

/// A finished segment as the agent keeps it: what HAL's encoder and segmenter did
/// (``HAL/SegmentMetadata``), and what the agent knows it means (``SegmentNotes``). One JSON
/// line of both is printed per segment (``jsonLine(file:)``).
public struct Segment: Sendable {
    public var metadata: SegmentMetadata
    public var notes: SegmentNotes
    public var data: [UInt8]
    /// `CLOCK_MONOTONIC` nanoseconds when the segmenter closed it: where its way to the wire starts.
    public var closedMonotonicNs: UInt64

    public init(metadata: SegmentMetadata, notes: SegmentNotes = .init(), data: [UInt8], closedMonotonicNs: UInt64 = MonotonicClock.now()) {
        self.metadata = metadata
        self.notes = notes
        self.data = data
        self.closedMonotonicNs = closedMonotonicNs
    }

    public init(_ encoded: EncodedSegment, notes: SegmentNotes = .init()) {
        self.init(metadata: encoded.metadata, notes: notes, data: encoded.data, closedMonotonicNs: encoded.closedMonotonicNs)
    }
}

/// What the agent adds to a segment: where the car was, what its clock was, why a parked car's
/// clip was recorded. Written beside the metadata's keys in the segment's JSON line.
public struct SegmentNotes: Codable, Sendable, Equatable {
    /// The GPS track over the segment, a point a second (`sensors.gps.gpsd`); nil without GPS.
    public var gps: [GPSPosition]?
    /// The wall clock's state when the segment closed.
    public var clock: SegmentClockState?
    /// Set on the clips of a parked car (they are protected, and not streamed).
    public var parking: SegmentParkingEvent?

    public init(gps: [GPSPosition]? = nil, clock: SegmentClockState? = nil, parking: SegmentParkingEvent? = nil) {
        self.gps = gps
        self.clock = clock
        self.parking = parking
    }
}

/// What a parked car's clip was recorded for.
public struct SegmentParkingEvent: Codable, Sendable, Equatable {
    /// `motion` or `impact`.
    public var trigger: String
    /// From the clip's first frame to the trigger, in ms: the pre-roll the clip holds.
    public var triggerOffsetMs: Int
}

/// The wall clock a segment was dated by.
public struct SegmentClockState: Codable, Sendable, Equatable {
    /// The kernel counts the clock as synchronised (nil: it cannot tell).
    public var synced: Bool?
    /// Where its time comes from: `gps` (chrony's GPS reference clock), `ntp`, `none` (not
    /// synchronised: the time the board booted with), or `unknown`.
    public var source: String
    /// The clock was stepped by this many seconds before this segment began (NTP arriving after
    /// boot, a GPS fix setting it): the segment is dated on a new timeline.
    public var steppedSeconds: Double? = nil
}
