public import Foundation
public import GuidanceProtocol

/// A verified segment, as an analyzer sees it.
public struct ReceivedSegment: Sendable {
    public var device: String
    public var locale: String
    public var header: ClientMessage.SegmentHeader
    public var data: Data
}

/// Turns a segment into guidance for the driver: the one place a model plugs in.
public protocol SegmentAnalyzer: Sendable {
    /// `nil` means no guidance for this segment.
    func analyze(_ segment: ReceivedSegment) async throws -> ServerMessage.Guidance?
}
