import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Testing

/// A segment header's GPS track: kept when every number is in range, left out (the segment still
/// taken) when not, and told to a model as speed and heading.
@Suite struct SegmentGPSTests {
    typealias Position = GPSPosition
    static let moving = Position(t: "2026-11-26T08:10:00.000Z", mode: 3, lat: 37.5665, lon: 126.978, alt: 53, speed: 13.89, track: 91.5)

    static func header(gps: [Position]?) -> String {
        ClientMessage.segment(
            .init(
                seq: 1, capturedAt: "2026-11-26T08:10:00.000Z", durationMs: 5000, frames: 50, bytes: 10,
                sha256: String(repeating: "a", count: 64), chunks: 1, gps: gps)
        ).encoded()
    }

    @Test func aTrackInRangeIsKeptAndOneOutOfRangeLeftOut() {
        var machine = StreamSessionStateMachineTests.opened()
        #expect(machine.text(Self.header(gps: [Self.moving])) == [.expect(bytes: 10)], "taken, waiting for its chunk")
        for bad in [
            [Position(t: "x", mode: 3, lat: 91, lon: 0)], [Position(t: "x", mode: 9)], [Position(t: "x", mode: 3, speed: -1)],
            [Position(t: "x", mode: 3, track: 400)], [Position(t: String(repeating: "x", count: 41), mode: 1)],
            Array(repeating: Self.moving, count: ClientMessage.SegmentHeader.maxPositions + 1)
        ] {
            var fresh = StreamSessionStateMachineTests.opened()
            let actions = fresh.text(Self.header(gps: bad))
            guard case .ignore(let why)? = actions.first, actions.dropFirst() == [.expect(bytes: 10)] else {
                Issue.record("\(actions)"); continue
            }
            #expect(why.contains("gps track"), "\(why)")
        }
        // A number JSON cannot hold in range is refused as unreadable, like any header that does not decode.
        var fresh = StreamSessionStateMachineTests.opened()
        let text = Self.header(gps: [Self.moving]).replacingOccurrences(of: "13.89", with: "1e999")
        #expect(StreamSessionStateMachineTests.reasons(fresh.text(text)) == [.unreadable])
    }

    @Test func theModelIsToldTheSpeedAndHeading() throws {
        let motion = try #require(ModelAnswer.Motion([Position(t: "a", mode: 1), Self.moving, Position(t: "b", mode: 1, speed: 30)]))
        #expect(abs(motion.speed - 50.004) < 0.001 && motion.heading == 91.5, "the newest point with a fix")
        #expect(
            ModelAnswer.prompt(locale: "ko-KR", motion: motion).hasSuffix(
                " The car's GPS says it is moving at 50 km/h, heading 92 degrees from north."))
        // Standing: no heading (a receiver's course is noise then); no fix, no GPS: nothing said.
        let standing = try #require(ModelAnswer.Motion([Position(t: "a", mode: 3, lat: 1, lon: 1, speed: 0.2, track: 200)]))
        #expect(ModelAnswer.prompt(locale: "en", motion: standing).hasSuffix(" The car's GPS says it is moving at 1 km/h."))
        #expect(ModelAnswer.Motion([Position(t: "a", mode: 1, speed: 3)]) == nil)
        #expect(ModelAnswer.Motion(nil) == nil)
        #expect(ModelAnswer.prompt(locale: "en", motion: nil) == ModelAnswer.prompt(locale: "en"))
        // Both request bodies carry it.
        let gemini = try GeminiAPI.requestBody(video: Data([1]), mimeType: "video/mp4", locale: "en", motion: motion)
        let openAI = try OpenAIChatAPI.requestBody(model: "m", jpegs: [], locale: "en", motion: motion)
        for body in [gemini, openAI] {
            #expect(String(decoding: body, as: UTF8.self).contains("moving at 50 km/h, heading 92 degrees"))
        }
    }
}
