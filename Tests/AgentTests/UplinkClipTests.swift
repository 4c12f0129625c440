import Agent
import Foundation
import GuidanceProtocol
import HAL
import Logging
import Testing

/// Clips on the uplink's session, without sockets: announced when a session opens, a part only
/// while no live segment waits, the silence rule watching clip answers too, and a clip leaving
/// custody only when the server stores it.
@Suite struct UplinkClipTests {
    typealias Machine = Uplink.StateMachine
    static let t0 = UplinkStateMachineTests.t0
    static let second = UplinkStateMachineTests.second
    static let one = ClipUploadsTests.clip("c1", files: [("a.mp4", 100_000)])

    /// A machine with these settings, session #1 open and welcomed at `t0`, and ``one`` announced
    /// at once and answered: the server holds none of it.
    static func announced(
        clips: ClipUploads.StateMachine.Settings = .init(), segmentPeriod: Duration? = nil, _ announcing: Comment,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Machine {
        var m = Machine(
            settings: .init(
                liveness: .seconds(10), ping: .seconds(5), drain: .milliseconds(1500), guidanceMaxAge: .seconds(10),
                queueSegments: 3, queueMaxAgeMs: 15_000, clips: clips, segmentPeriod: segmentPeriod))
        _ = m.start(now: t0)
        _ = m.opened(SessionID(1), now: t0)
        _ = m.received(.welcome(session: "s1", remainingSeconds: nil), on: SessionID(1), now: t0)
        _ = m.clip(one, now: t0)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: t0) == .announce(one), announcing, sourceLocation: sourceLocation)
        _ = m.received(.clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 0)], stored: false)), on: SessionID(1), now: t0)
        return m
    }

    @Test func aClipGoesBetweenSegmentsAndLeavesWhenTheServerStoresIt() {
        var m = UplinkStateMachineTests.connected()
        #expect(m.clip(Self.one, now: Self.t0) == [.wakeSender(SessionID(1))])
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == .announce(Self.one))
        _ = m.received(.clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 0)], stored: false)), on: SessionID(1), now: Self.t0)
        // A live segment waits: the road goes first, and no part leaves until it is sent.
        _ = m.segment(UplinkStateMachineTests.seg(0), now: Self.t0)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == nil)
        #expect(UplinkStateMachineTests.drainSends(&m, SessionID(1), now: Self.t0) == [0])
        #expect(
            m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
                == .part(.init(id: "c1", name: "a.mp4", offset: 0, bytes: 65_536)))
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == nil, "one part in flight")
        _ = m.received(
            .clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 65_536)], stored: false)), on: SessionID(1), now: Self.t0)
        #expect(
            m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
                == .part(.init(id: "c1", name: "a.mp4", offset: 65_536, bytes: 34_464)))
        let stored = m.received(
            .clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 100_000)], stored: true)), on: SessionID(1), now: Self.t0)
        #expect(stored.contains(.clipStored("c1")), "\(stored)")
        #expect(m.clips.waiting.isEmpty)
    }

    /// The link dies mid-upload: the next session announces the clip again, and the car goes on
    /// from what the server says it holds, not from what it sent.
    @Test func aSessionLostMidUploadGoesOnFromTheServersCount() {
        var m = UplinkStateMachineTests.connected()
        _ = m.clip(Self.one, now: Self.t0)
        _ = m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
        _ = m.received(.clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 0)], stored: false)), on: SessionID(1), now: Self.t0)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) != nil)
        _ = m.ended(SessionID(1), code: nil, now: Self.t0 + Self.second)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == nil, "the old session sends nothing")
        let retry = m.tick(now: Self.t0 + 60 * Self.second)
        #expect(retry.contains(.connect(SessionID(2))), "\(retry)")
        #expect(m.opened(SessionID(2), now: Self.t0 + 60 * Self.second) == [.wakeSender(SessionID(2))], "a clip waits: the sender wakes")
        #expect(m.nextClipMessage(session: SessionID(2), day: 1, now: Self.t0) == .announce(Self.one))
        _ = m.received(
            .clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 40_000)], stored: false)), on: SessionID(2), now: Self.t0)
        #expect(
            m.nextClipMessage(session: SessionID(2), day: 1, now: Self.t0)
                == .part(.init(id: "c1", name: "a.mp4", offset: 40_000, bytes: 60_000)))
    }

    /// A server that takes a part and then says nothing is given up like one that never
    /// acknowledges a segment: the link may be dead without a close.
    @Test func aSilentServerWithAClipAnswerOutstandingIsGivenUp() {
        var m = UplinkStateMachineTests.connected()
        _ = m.clip(Self.one, now: Self.t0)
        _ = m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
        #expect(m.tick(now: Self.t0 + 9 * Self.second) == [])
        let actions = m.tick(now: Self.t0 + 10 * Self.second)
        #expect(actions.contains(.connect(SessionID(2))), "\(actions)")
        #expect(
            actions.contains { if case .log(.warning, let text) = $0 { text.contains("a clip's answer") } else { false } }, "\(actions)")
    }

    /// Only on wireless LAN with `upload.when: wifi`; the sender wakes when the car joins one.
    @Test func wifiOnlyClipsWaitForAWirelessLAN() {
        var m = Self.announced(clips: .init(wifiOnly: true), "announced on any network")
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == nil)
        #expect(m.clips.whyWaiting(segmentsWaiting: false) == .wifi)
        #expect(m.network(wifi: true) == [.wakeSender(SessionID(1))])
        #expect(
            m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
                == .part(.init(id: "c1", name: "a.mp4", offset: 0, bytes: 65_536)))
    }

    /// Segments every 5 s, a part's round trip of 200 ms: a part goes only if twice that fits
    /// before the next segment is due, so the segment finds the link clear.
    static func pacedWithAPartAnswered() -> Machine {
        var m = UplinkStateMachineTests.connected()
        for (seq, at) in [(0, t0), (1, t0 + 5 * second)] {
            _ = m.segment(UplinkStateMachineTests.seg(seq, at: at), now: at)
            #expect(UplinkStateMachineTests.drainSends(&m, SessionID(1), now: at) == [seq])
            _ = m.received(.ack(seq: seq), on: SessionID(1), now: at)
        }
        let t5 = t0 + 5 * second
        _ = m.clip(Self.one, now: t5)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: t5) == .announce(Self.one))
        _ = m.received(.clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 0)], stored: false)), on: SessionID(1), now: t5)
        #expect(
            m.nextClipMessage(session: SessionID(1), day: 1, now: t5 + second)
                == .part(.init(id: "c1", name: "a.mp4", offset: 0, bytes: 65_536)))
        _ = m.received(
            .clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 65_536)], stored: false)), on: SessionID(1),
            now: t5 + second + 200_000_000)
        #expect(m.partRoundTrip == 200_000_000)
        return m
    }

    @Test func partsPauseWhenALiveSegmentIsDueAndGoOnOnceItIsSent() {
        var m = Self.pacedWithAPartAnswered()
        let due = Self.t0 + 10 * Self.second
        // The next part is the file's last: the server checks the whole file before it answers,
        // which until seen counts as four parts' round trip (800 ms): twice that must fit.
        #expect(m.clips.upcomingPart?.finishesFile == true)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: due - 1_000_000_000) == nil, "1 s before: the segment's time")
        _ = m.segment(UplinkStateMachineTests.seg(2, at: due), now: due)
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: due) == nil, "the segment goes first")
        #expect(UplinkStateMachineTests.drainSends(&m, SessionID(1), now: due) == [2])
        #expect(
            m.nextClipMessage(session: SessionID(1), day: 1, now: due)
                == .part(.init(id: "c1", name: "a.mp4", offset: 65_536, bytes: 34_464)))
        _ = m.received(
            .clipHave(.init(id: "c1", files: [.init(name: "a.mp4", have: 100_000)], stored: true)), on: SessionID(1),
            now: due + 700_000_000)
        #expect(m.finishRoundTrip == 700_000_000 && m.partRoundTrip == 200_000_000, "a file's check is timed apart from a part")
    }

    /// A part that does not finish its file needs only twice a part's round trip before the segment.
    @Test func aPartInTheMiddleOfAFileGoesCloserToTheSegment() {
        var m = UplinkStateMachineTests.connected()
        for (seq, at) in [(0, Self.t0), (1, Self.t0 + 5 * Self.second)] {
            _ = m.segment(UplinkStateMachineTests.seg(seq, at: at), now: at)
            _ = UplinkStateMachineTests.drainSends(&m, SessionID(1), now: at)
            _ = m.received(.ack(seq: seq), on: SessionID(1), now: at)
        }
        let big = ClipUploadsTests.clip("c2", files: [("b.mp4", 1_000_000)])
        _ = m.clip(big, now: Self.t0 + 5 * Self.second)
        _ = m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0 + 5 * Self.second)
        _ = m.received(
            .clipHave(.init(id: "c2", files: [.init(name: "b.mp4", have: 0)], stored: false)), on: SessionID(1),
            now: Self.t0 + 5 * Self.second)
        let due = Self.t0 + 10 * Self.second
        #expect(m.clips.upcomingPart?.finishesFile == false)
        // No round trip seen yet: the least margin, 20 ms.
        var late = m, early = m
        #expect(late.nextClipMessage(session: SessionID(1), day: 1, now: due - 10_000_000) == nil, "10 ms before the segment")
        #expect(early.nextClipMessage(session: SessionID(1), day: 1, now: due - 50_000_000) != nil, "50 ms before it")
    }

    /// An agent just started: the first segment's time is not known
    /// yet, so parts wait for it, and for at most two segments' length.
    @Test func partsWaitForTheFirstSegmentOfASession() {
        var m = Self.announced(segmentPeriod: .seconds(2), "announced at once")
        var cameraless = m
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0 + Self.second) == nil, "no segment yet")
        _ = m.segment(UplinkStateMachineTests.seg(0, at: Self.t0 + 1_500_000_000), now: Self.t0 + 1_500_000_000)
        #expect(UplinkStateMachineTests.drainSends(&m, SessionID(1), now: Self.t0 + 1_500_000_000) == [0])
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0 + 1_500_000_000) != nil, "right after it")
        // A camera that gives nothing holds the clip back two segments' length, no more.
        #expect(cameraless.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0 + 3 * Self.second) == nil)
        #expect(cameraless.tick(now: Self.t0 + 4 * Self.second).contains(.wakeSender(SessionID(1))))
        #expect(cameraless.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0 + 4 * Self.second) != nil)
    }

    @Test func aSegmentThatDoesNotComeHoldsThePartsBackHalfAPeriodAtMost() {
        var m = Self.pacedWithAPartAnswered()
        let due = Self.t0 + 10 * Self.second
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: due - 100_000_000) == nil)
        #expect(m.nextDeadline.map { $0 <= due + 2_500_000_000 } == true)
        #expect(m.tick(now: due + 2_500_000_000) == [.wakeSender(SessionID(1))], "the camera may have stopped: the clip goes on")
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: due + 2_500_000_000) != nil)
    }

    /// A server without a clip store refuses the announce: set aside until the next session,
    /// never sent part by part, and the refusal is logged, not delivered to the driver.
    @Test func aRefusedAnnounceIsSetAsideUntilTheNextSession() {
        var m = UplinkStateMachineTests.connected()
        _ = m.clip(Self.one, now: Self.t0)
        _ = m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0)
        let actions = m.received(.error(code: .badClip, message: "this server keeps no clips", seq: nil), on: SessionID(1), now: Self.t0)
        #expect(!actions.contains { if case .deliver = $0 { true } else { false } }, "\(actions)")
        #expect(m.nextClipMessage(session: SessionID(1), day: 1, now: Self.t0) == nil)
        #expect(m.clips.waiting.map(\.id) == ["c1"])
    }
}

/// The clips kept on the card until the server stores them.
@Suite struct ClipCustodyTests {
    static func folder() throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("custody-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("2026-11-29"), withIntermediateDirectories: true)
        return root
    }

    @Test func aClipIsDescribedFromTheCardKeptAcrossARestartAndReadPartByPart() throws {
        let root = try Self.folder()
        defer { try? FileManager.default.removeItem(at: root) }
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let path = "2026-11-29/000012-20261129T080230.000Z.mp4"
        try Data(bytes).write(to: root.appendingPathComponent(path))
        let segment = try #require(StoredSegment(path: path, bytes: Int64(bytes.count)))
        let at = segment.capturedAt.addingTimeInterval(2)
        let entry = try #require(
            ClipCustody.make(
                id: "incident-1", kind: "incident", at: at, from: segment.capturedAt,
                to: segment.capturedAt.addingTimeInterval(5), clock: "synced", peakG: 2.1,
                segments: [segment], gps: [], root: root))
        // The digest as coreutils computes it.
        let sha256sum = Process()
        sha256sum.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        sha256sum.arguments = [root.appendingPathComponent(path).path]
        let out = Pipe()
        sha256sum.standardOutput = out
        try sha256sum.run()
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        sha256sum.waitUntilExit()
        let expected = String(printed.prefix(64))
        #expect(entry.clip.files == [.init(name: segment.name, bytes: bytes.count, sha256: expected)])
        #expect(entry.clip.triggerMs == 2000 && entry.clip.problem(maxFileBytes: 1 << 26) == nil)

        let custody = ClipCustody(root: root)
        try custody.keep(entry)
        #expect(ClipCustody(root: root).all().entries == [entry], "found again by a new run")
        // Moved into protected/ by a later protect: still read.
        try FileManager.default.createDirectory(at: root.appendingPathComponent("protected/2026-11-29"), withIntermediateDirectories: true)
        try FileManager.default.moveItem(at: root.appendingPathComponent(path), to: root.appendingPathComponent("protected/" + path))
        let part = try custody.read(.init(id: "incident-1", name: segment.name, offset: 150_000, bytes: 50_000), of: entry)
        #expect(part == Array(bytes[150_000...]))
        // A file cut short (a card that lost it) is an error, not a short part.
        #expect(throws: ClipReadError.self) {
            try custody.read(.init(id: "incident-1", name: segment.name, offset: 190_000, bytes: 20_000), of: entry)
        }
        custody.release("incident-1")
        #expect(custody.all().entries.isEmpty)
    }

    @Test func aDamagedCustodyFileIsNamedAndLeftAlone() throws {
        let root = try Self.folder()
        defer { try? FileManager.default.removeItem(at: root) }
        let folder = root.appendingPathComponent(ClipCustody.folder)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Data("{\"clip\":".utf8).write(to: folder.appendingPathComponent("x.json"))
        let found = ClipCustody(root: root).all()
        #expect(found.entries.isEmpty && found.unreadable == [ClipCustody.folder + "/x.json"])
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("x.json").path))
    }
}
