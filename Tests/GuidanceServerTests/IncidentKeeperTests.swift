import Foundation
import GuidanceProtocol
@testable import GuidanceServer
import Testing

/// What the server keeps of a car's incident (`incident`): the message checked, the segments it
/// names linked into `keepDir/incidents/<device>-<stream>-<id>/`, now or when they arrive.
@Suite struct IncidentKeeperTests {
    static func incident(
        id: String = "20261126T080230.822Z", seqs: [Int] = [3, 4, 5], final: Bool = false,
        at: String = "2026-11-26T08:02:30.822Z", from: String = "2026-11-26T08:02:20.822Z",
        to: String = "2026-11-26T08:02:40.822Z", peakG: Double = 2.4
    ) -> ClientMessage.Incident {
        .init(id: id, at: at, from: from, to: to, peakG: peakG, seqs: seqs, final: final)
    }

    @Test func aValidIncidentIsKeptAndABadOneRefused() {
        var machine = StreamSessionStateMachineTests.opened()
        let good = Self.incident()
        #expect(machine.text(ClientMessage.incident(good).encoded()) == [.keepIncident(good)])
        for bad in [
            Self.incident(id: ""), Self.incident(id: "../../etc"), Self.incident(id: String(repeating: "a", count: 65)),
            Self.incident(id: "a b"), Self.incident(seqs: Array(0...64)), Self.incident(seqs: [-1]),
            Self.incident(seqs: [Int(Int32.max) + 1]),
            Self.incident(peakG: -1), Self.incident(peakG: 1e9), Self.incident(at: "yesterday"),
            Self.incident(from: "2026-11-26T08:02:31.000Z"),  // after `at`
            Self.incident(to: "2026-11-26T08:05:40.822Z"),  // 200 s
            Self.incident(at: "2026-11-26T08:02:30.822+09:00")  // UTC only
        ] {
            let actions = machine.text(ClientMessage.incident(bad).encoded())
            #expect(StreamSessionStateMachineTests.reasons(actions) == [.unreadable], "\(bad): \(actions)")
        }
        #expect(StreamSessionStateMachineTests.reasons(machine.text(#"{"type":"incident","id":"x"}"#)) == [.unreadable])
        #expect(machine.isOpen, "a bad incident is told and survived")
        var fresh = StreamSession.StateMachine(limits: StreamSessionStateMachineTests.limits)
        #expect(fresh.text(ClientMessage.incident(good).encoded()) == [.close(reason: "first message must be hello")])
    }

    @Test func theNamedSegmentsAreLinkedNowOrWhenTheyArrive() throws {
        let keep = FileManager.default.temporaryDirectory.appendingPathComponent("keep-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: keep, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: keep) }
        func segment(_ seq: Int) throws -> URL {
            let file = keep.appendingPathComponent(StreamSession.keptName(device: "car-1", stream: "s/1", seq: seq))
            try Data("segment \(seq)".utf8).write(to: file)
            return file
        }
        _ = try segment(3)
        _ = try segment(4)
        var keeper = IncidentKeeper(keepDir: keep.path, device: "car-1", stream: "s/1")
        let kept = try #require(try keeper.keep(Self.incident()))
        let folder = keep.appendingPathComponent("incidents/car-1-s_1-20261126T080230.822Z")
        #expect(kept.folder == folder.path && kept.linked == [3, 4] && kept.waiting == [5])
        // Segment 5 arrives: linked, once.
        #expect(keeper.kept(seq: 5, file: try segment(5)) == [folder.path])
        #expect(keeper.kept(seq: 5, file: try segment(5)).isEmpty)
        #expect(keeper.kept(seq: 6, file: try segment(6)).isEmpty, "not named")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(names == ["car-1-s_1-000003.mp4", "car-1-s_1-000004.mp4", "car-1-s_1-000005.mp4", "incident.json"])
        // Links, not copies: the same inode.
        let linked = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("car-1-s_1-000003.mp4").path)
        let original = try FileManager.default.attributesOfItem(atPath: keep.appendingPathComponent("car-1-s_1-000003.mp4").path)
        #expect((linked[.systemFileNumber] as? Int) == (original[.systemFileNumber] as? Int))
        // The final message again: the record is the newest, nothing is linked twice.
        let final = Self.incident(seqs: [3, 4, 5, 6], final: true)
        #expect(try keeper.keep(final)?.linked == [3, 4, 5, 6])
        let record =
            try JSONSerialization.jsonObject(with: Data(contentsOf: folder.appendingPathComponent("incident.json"))) as? [String: Any]
        #expect((record?["incident"] as? [String: Any])?["final"] as? Bool == true)
        #expect(record?["device"] as? String == "car-1")
    }

    @Test func whatACarCanMakeTheSessionRememberIsBounded() throws {
        let keep = FileManager.default.temporaryDirectory.appendingPathComponent("keep-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: keep) }
        var keeper = IncidentKeeper(keepDir: keep.path, device: "car-1", stream: "s1")
        for i in 0..<20 {
            _ = try keeper.keep(Self.incident(id: "i\(i)", seqs: Array((i * 64)..<(i * 64 + 64))))
        }
        #expect(keeper.waiting.values.reduce(0) { $0 + $1.count } == IncidentKeeper.maxWaiting)
    }

    @Test func withoutKeepDirNothingIsKept() throws {
        var keeper = IncidentKeeper(keepDir: nil, device: "car-1", stream: "s1")
        #expect(try keeper.keep(Self.incident()) == nil)
        #expect(keeper.kept(seq: 3, file: URL(fileURLWithPath: "/nonexistent")).isEmpty)
    }
}
