public import HAL

/// Pairs the two streams' segments (evidence and the guidance copy) that start at the same
/// captured frame, so each names the other and both carry one sequence number, one wall time.
///
/// The rules, without a clock or an encoder: a segment is matched by its first slot's monotonic
/// time (both timelines cut at the same seconds from the same first frame); a pair comes out
/// guidance first (the network does not wait for the disk), then evidence, both numbered and
/// dated as the evidence is. A segment whose partner cannot come any more (the other stream is
/// past it, or more than ``maxWaiting`` wait) comes out alone; ``drain()`` lets out what waits.
public struct SegmentPairing: Sendable {
    public static let maxWaiting = 3
    private var waiting: [SegmentStream: [Segment]] = [.evidence: [], .guidance: []]
    /// Segments that came out without a partner.
    public private(set) var unpaired = 0

    public init() {}

    /// Takes one stream's finished segment; returns the segments ready to go out, in order.
    public mutating func add(_ segment: Segment, from stream: SegmentStream) -> [Segment] {
        var segment = segment
        segment.metadata.stream = stream
        let other: SegmentStream = stream == .evidence ? .guidance : .evidence
        let start = segment.metadata.captureStartMonotonicNs
        var ready: [Segment] = []
        // The other stream's segments from before this one will not be matched any more.
        while let first = waiting[other]!.first, first.metadata.captureStartMonotonicNs < start {
            ready.append(alone(waiting[other]!.removeFirst()))
        }
        if let first = waiting[other]!.first, first.metadata.captureStartMonotonicNs == start {
            waiting[other]!.removeFirst()
            ready += pair(stream == .evidence ? (segment, first) : (first, segment))
        } else {
            waiting[stream]!.append(segment)
            while waiting[stream]!.count > Self.maxWaiting { ready.append(alone(waiting[stream]!.removeFirst())) }
        }
        return ready
    }

    /// Everything still waiting, alone, oldest first (both streams were flushed: no partner comes).
    public mutating func drain() -> [Segment] {
        let rest = (waiting[.evidence]! + waiting[.guidance]!).sorted {
            ($0.metadata.captureStartMonotonicNs, $0.metadata.stream == .guidance ? 0 : 1)
                < ($1.metadata.captureStartMonotonicNs, $1.metadata.stream == .guidance ? 0 : 1)
        }
        waiting = [.evidence: [], .guidance: []]
        unpaired += rest.count
        return rest
    }

    private mutating func alone(_ segment: Segment) -> Segment {
        unpaired += 1
        return segment
    }

    private func pair(_ both: (evidence: Segment, guidance: Segment)) -> [Segment] {
        var (evidence, guidance) = both
        guidance.metadata.seq = evidence.metadata.seq
        guidance.metadata.capturedAt = evidence.metadata.capturedAt
        guidance.notes = evidence.notes
        evidence.metadata.partner = SegmentPartner(of: guidance.metadata, stream: .guidance)
        guidance.metadata.partner = SegmentPartner(of: evidence.metadata, stream: .evidence)
        return [guidance, evidence]
    }
}
