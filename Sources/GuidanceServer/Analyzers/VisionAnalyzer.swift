import CRoadVision
public import Foundation
public import GuidanceProtocol
import NIOPosix
public import RoadScene

/// Guidance from the segment itself, on this machine's CPU, with no model service: a few frames
/// decoded with libavcodec, checked for a usable picture (too dark, lens covered, frozen), then
/// searched for people with OpenCV's HOG detector (``RoadLook``). The words come from
/// ``RoadFinding``'s tables, in the device's language.
public final class VisionAnalyzer: SegmentAnalyzer {
    /// Frames looked at per segment, spread over it.
    public let framesPerSegment: Int
    /// Frames are decoded at most this wide (``RoadLook/searchHeight`` then sets the size searched).
    public let maxWidth: Int
    public let look: RoadLook
    private let detector: PeopleDetector

    public init(framesPerSegment: Int, maxWidth: Int = 960, look: RoadLook = RoadLook()) throws {
        self.framesPerSegment = max(1, framesPerSegment)
        self.maxWidth = maxWidth
        self.look = look
        detector = try PeopleDetector(
            .linked(.init(new: road_people_detector_new, free: road_people_detector_free, detect: road_people_detect)))
    }

    public func analyze(_ segment: ReceivedSegment) async throws -> ServerMessage.Guidance? {
        let result = try await result(for: segment.data)
        guard let finding = result.finding else {
            return .init(seq: segment.header.seq, text: "", lang: segment.locale, clear: true, priority: .normal)
        }
        let (text, lang) = finding.text(locale: segment.locale)
        return .init(seq: segment.header.seq, text: text, lang: lang, clear: false, priority: finding.urgent ? .urgent : .normal)
    }

    /// What the frames of `data` show. The frames looked at are spread by the count the MP4 itself
    /// gives (never a number a client sent), and decoding stops once `framesPerSegment` are in
    /// hand: whatever the file claims, no more than that many gray frames are ever held.
    public func result(for data: Data) async throws -> RoadLook.Result {
        let look = self.look, detector = self.detector, maxWidth = self.maxWidth, wanted = framesPerSegment
        return try await SegmentVideo.onPool(data) { bytes in
            let frames = try SegmentVideo.inspect(bytes).frames
            let every = max(1, frames / wanted)
            let gray = try SegmentVideo.grayFrames(bytes, every: every, maxWidth: maxWidth, limit: wanted)
            return try look.look(at: gray, detector: detector)
        }
    }
}
