public import Foundation
public import GuidanceProtocol

/// A verified segment, as an analyzer sees it.
public struct ReceivedSegment: Sendable {
    public var device: String
    /// The stream it was charged under (the agent's stream id, or the session's): with `device`
    /// and `header.seq`, the key the ledger records a model's tokens under.
    public var stream: String
    public var locale: String
    public var header: ClientMessage.SegmentHeader
    public var data: Data

    public init(device: String, stream: String, locale: String, header: ClientMessage.SegmentHeader, data: Data) {
        self.device = device
        self.stream = stream
        self.locale = locale
        self.header = header
        self.data = data
    }
}

/// Turns a segment into guidance for the driver: the one place a model plugs in.
public protocol SegmentAnalyzer: Sendable {
    /// `nil` means no guidance for this segment.
    func analyze(_ segment: ReceivedSegment) async throws -> ServerMessage.Guidance?
}
