import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import RoadScene
import TestSupport
import Testing

/// The `vision` analyzer on clips made for it and on real footage nobody here made: `vtest.avi`
/// from Debian's opencv-doc (people walking across a campus road), cut into segments.
@Suite(.serialized) struct VisionAnalyzerTests {
    static let vtest = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
    static var hasFootage: Bool { FileManager.default.fileExists(atPath: vtest) }

    /// A 3 s HEVC clip made by the ffmpeg CLI from `input` (lavfi or a file) with `filter`.
    static func clip(_ input: [String], filter: String? = nil, seconds: Int = 2) async throws -> Data {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("vision-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        let made = try await Command.executeAsync(
            "ffmpeg",
            ["-v", "error"] + input + ["-t", "\(seconds)", "-r", "10"] + (filter.map { ["-vf", $0] } ?? [])
                + ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-y", file.path])
        guard made.status == 0 else { throw SegmentVideo.Failure(description: "ffmpeg: \(made.stderr)") }
        return try Data(contentsOf: file)
    }

    static func analyze(_ data: Data, locale: String = "en-US") async throws -> ServerMessage.Guidance? {
        try await VisionAnalyzer(framesPerSegment: 4).analyze(
            ReceivedSegment(
                device: "car-1", stream: "s", locale: locale,
                header: .init(seq: 1, capturedAt: "", durationMs: 2000, frames: 20, bytes: data.count, sha256: "", chunks: 1),
                data: data))
    }

    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"), arguments: [0, 40])
    func peopleWalkingInRealFootageArePedestriansInTheDevicesLanguage(startSecond: Int) async throws {
        let data = try await Self.clip(["-ss", "\(startSecond)", "-i", Self.vtest], seconds: 2)
        let guidance = try #require(try await Self.analyze(data, locale: "ko-KR"))
        #expect(!guidance.clear)
        #expect(guidance.text.contains("보행자"), "\(guidance.text)")
        #expect(guidance.lang == "ko-KR")
    }

    /// The camera sizes the board profiles record: people 40 to 90 rows tall at 640x360, below
    /// HOG's 128-row window, are found because every picture is searched at the same height.
    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"), arguments: ["640:360", "1280:720"])
    func peopleAreFoundAtTheCamerasOwnSize(size: String) async throws {
        let data = try await Self.clip(["-ss", "35", "-i", Self.vtest], filter: "scale=\(size)", seconds: 2)
        let guidance = try #require(try await Self.analyze(data))
        #expect(!guidance.clear && guidance.text.hasPrefix("Pedestrian"), "\(size): \(guidance)")
    }

    /// The woman who walks below the camera at 56 s, cut out so that she fills most of a 640x360
    /// picture, feet at its bottom: as a pedestrian just ahead of the car would.
    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"))
    func aClosePedestrianIsUrgent() async throws {
        let data = try await Self.clip(["-ss", "55.5", "-i", Self.vtest], filter: "crop=480:270:0:306,scale=640:360", seconds: 2)
        let guidance = try #require(try await Self.analyze(data, locale: "fr-FR"))
        #expect(guidance.priority == .urgent && guidance.text == RoadFinding.pedestrianClose.text(locale: "fr-FR").text, "\(guidance)")
    }

    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"))
    func aDarkClipIsTooDark() async throws {
        let data = try await Self.clip(["-i", Self.vtest], filter: "eq=brightness=-0.45,noise=alls=4:allf=t", seconds: 2)
        let guidance = try #require(try await Self.analyze(data, locale: "de-DE"))
        #expect(guidance.text == RoadFinding.tooDark.text(locale: "de-DE").text && guidance.priority == .normal && !guidance.clear)
    }

    @Test func aFlatPictureIsACoveredLensAndAStillOneIsFrozen() async throws {
        let covered = try await Self.clip(["-f", "lavfi", "-i", "color=c=0x807060:s=320x240"], filter: "noise=alls=3:allf=t")
        #expect(try await Self.analyze(covered)?.text == "The camera lens looks covered.")
        let still = try await Self.clip(
            ["-f", "lavfi", "-i", "testsrc2=s=320x240:r=10"], filter: "trim=end_frame=1,loop=loop=-1:size=1,setpts=N/10/TB")
        #expect(try await Self.analyze(still)?.text == "The camera picture is frozen.")
    }

    @Test func aMovingPictureWithoutPeopleIsAClearRoad() async throws {
        let data = try await Self.clip(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=10"])
        let guidance = try #require(try await Self.analyze(data))
        #expect(guidance.clear && guidance.text.isEmpty, "\(guidance)")
    }

    // MARK: - The checks themselves, on frames made here

    static func frame(_ value: (Int) -> UInt8, index: Int = 0) -> GrayFrame {
        GrayFrame(width: 64, height: 48, pixels: (0..<(64 * 48)).map(value), index: index)
    }

    @Test func sceneChecksOnFramesOfKnownContent() {
        let check = SceneCheck()
        let dark = Self.frame { UInt8(($0 * 7) % 40) }
        let flat = Self.frame { _ in 150 }
        let busy = Self.frame { UInt8(($0 * 37) % 256) }
        let moved = Self.frame({ UInt8(($0 * 37 + 11) % 256) }, index: 10)
        #expect(check.finding(in: [dark, dark]) == .tooDark)
        #expect(check.finding(in: [dark]) == .tooDark)
        #expect(check.finding(in: [busy, moved, dark, dark]) == .tooDark, "dark now, whatever came before")
        #expect(check.finding(in: [busy, moved, dark]) == nil, "one dark frame is a shadow")
        #expect(check.finding(in: [dark, dark, busy]) == nil, "light again")
        #expect(check.finding(in: [flat, flat]) == .lensCovered)
        #expect(check.finding(in: [busy, busy, busy]) == .frozen)
        #expect(check.finding(in: [busy, moved]) == nil)
        #expect(check.finding(in: [busy]) == nil, "one frame cannot be frozen")
        #expect(check.finding(in: []) == nil)
        #expect(busy.difference(from: GrayFrame(width: 2, height: 2, pixels: [0, 0, 0, 0])) == .infinity)
    }

    @Test func everyFindingHasATextInEveryLanguageAndOthersGetEnglish() {
        for language in RoadFinding.languages {
            let texts = RoadFinding.allCases.map { $0.text(locale: language).text }
            #expect(Set(texts).count == RoadFinding.allCases.count, "\(language)")
            if language != "en" {
                #expect(texts != RoadFinding.allCases.map { $0.text(locale: "en").text }, "\(language) has its own texts")
            }
        }
        #expect(RoadFinding.pedestrian.text(locale: "pt_BR") == ("Pedestre à frente.", "pt_BR"))
        #expect(RoadFinding.pedestrian.text(locale: "sv-SE") == ("Pedestrian ahead.", "en"))
        #expect(RoadFinding.pedestrianClose.urgent && !RoadFinding.pedestrian.urgent && !RoadFinding.tooDark.urgent)
    }
}
