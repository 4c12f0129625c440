import Agent
import GuidanceProtocol
import Testing

/// The car's side of a clip upload, without a socket: announce on every session, go on from what
/// the server says it holds, one part at a time and never ahead of a live segment, within the
/// day's budget and the network it is allowed on.
@Suite struct ClipUploadsTests {
    typealias Machine = ClipUploads.StateMachine

    static func clip(_ id: String, files: [(String, Int)]) -> ClientMessage.Clip {
        .init(
            id: id, kind: "incident", at: "2026-11-29T08:02:30.822Z", from: "2026-11-29T08:02:20.822Z", to: "2026-11-29T08:02:40.822Z",
            files: files.map { .init(name: $0.0, bytes: $0.1, sha256: String(repeating: "a", count: 64)) })
    }

    static let one = clip("c1", files: [("a.mp4", 100_000), ("b.mp4", 10)])
    static let two = clip("c2", files: [("c.mp4", 5)])

    static func have(_ id: String, _ files: [(String, Int)], stored: Bool = false) -> ServerMessage.ClipHave {
        .init(id: id, files: files.map { .init(name: $0.0, have: $0.1) }, stored: stored)
    }

    /// Everything `machine` would send now, answering none of it.
    static func drain(_ machine: inout Machine, segmentsWaiting: Bool = false, day: Int = 1) -> [Machine.Send] {
        var sent: [Machine.Send] = []
        while let next = machine.next(segmentsWaiting: segmentsWaiting, day: day) { sent.append(next) }
        return sent
    }

    @Test func eachSessionAnnouncesEveryClipAndGoesOnFromWhatTheServerHolds() {
        var machine = Machine(settings: .init())
        machine.add(Self.one)
        #expect(machine.next(segmentsWaiting: false, day: 1) == nil, "no session, nothing sent")
        machine.opened()
        machine.add(Self.two)
        #expect(Self.drain(&machine) == [.announce(Self.one), .announce(Self.two)], "announces, and no part before their answers")
        #expect(
            machine.heard(Self.have("c1", [("a.mp4", 65_536), ("b.mp4", 0)])) == [.resuming(clip: "c1", held: 65_536, bytes: 100_010)],
            "the first answer of a session tells what the server holds already")
        #expect(machine.heard(Self.have("c2", [("c.mp4", 0)])).isEmpty)
        // One part, then nothing until its answer.
        #expect(Self.drain(&machine) == [.part(.init(id: "c1", name: "a.mp4", offset: 65_536, bytes: 34_464))])
        #expect(machine.heard(Self.have("c1", [("a.mp4", 100_000)])).isEmpty)
        #expect(Self.drain(&machine) == [.part(.init(id: "c1", name: "b.mp4", offset: 0, bytes: 10))])
        #expect(machine.heard(Self.have("c1", [("b.mp4", 10)], stored: true)) == [.stored("c1")])
        #expect(Self.drain(&machine) == [.part(.init(id: "c2", name: "c.mp4", offset: 0, bytes: 5))])

        // The link dies before the answer: the next session announces again, and the server's
        // answer, not the car's memory, says where to go on from.
        machine.closed()
        #expect(machine.heard(Self.have("c2", [("c.mp4", 5)], stored: true)).isEmpty, "an answer on no session is not heard")
        machine.opened()
        #expect(Self.drain(&machine) == [.announce(Self.two)])
        #expect(machine.heard(Self.have("c2", [("c.mp4", 5)], stored: true)) == [.stored("c2")])
        #expect(machine.waiting.isEmpty && Self.drain(&machine).isEmpty)
    }

    @Test func aLiveSegmentAlwaysGoesFirst() {
        var machine = Machine(settings: .init())
        machine.add(Self.two)
        machine.opened()
        _ = Self.drain(&machine)
        _ = machine.heard(Self.have("c2", [("c.mp4", 0)]))
        #expect(Self.drain(&machine, segmentsWaiting: true).isEmpty)
        #expect(machine.whyWaiting(segmentsWaiting: true) == .segments)
        #expect(Self.drain(&machine, segmentsWaiting: false) == [.part(.init(id: "c2", name: "c.mp4", offset: 0, bytes: 5))])
    }

    @Test func aFileTheServerDroppedIsSentAgainFromItsStart() {
        var machine = Machine(settings: .init())
        machine.add(Self.two)
        machine.opened()
        _ = Self.drain(&machine)
        _ = machine.heard(Self.have("c2", [("c.mp4", 0)]))
        _ = Self.drain(&machine)
        // Its SHA-256 did not match: the server holds nothing of it any more.
        #expect(machine.heard(Self.have("c2", [("c.mp4", 0)])).isEmpty, "from 0 to 0 is not a drop")
        _ = Self.drain(&machine)
        _ = machine.heard(Self.have("c2", [("c.mp4", 3)]))
        _ = Self.drain(&machine)
        #expect(machine.heard(Self.have("c2", [("c.mp4", 0)])) == [.dropped(clip: "c2", file: "c.mp4")])
        #expect(Self.drain(&machine) == [.part(.init(id: "c2", name: "c.mp4", offset: 0, bytes: 5))])
    }

    @Test func aRefusedClipIsSetAsideUntilTheNextSession() {
        var machine = Machine(settings: .init())
        machine.add(Self.one)
        machine.add(Self.two)
        machine.opened()
        _ = Self.drain(&machine)
        // The first announce is refused (a server without clips.dir, say): answers match by order.
        #expect(
            machine.refused("this server keeps no clips") == [.refused(clip: "c1", reason: "this server keeps no clips", setAside: true)])
        _ = machine.heard(Self.have("c2", [("c.mp4", 0)]))
        #expect(Self.drain(&machine) == [.part(.init(id: "c2", name: "c.mp4", offset: 0, bytes: 5))])
        // A refused part announces its clip again, at most maxRefusals times a session.
        for round in 1...Machine.maxRefusals {
            let events = machine.refused("not announced")
            #expect(events == [.refused(clip: "c2", reason: "not announced", setAside: round == Machine.maxRefusals)])
            let sent = Self.drain(&machine)
            if round < Machine.maxRefusals {
                #expect(sent == [.announce(Self.two)])
                _ = machine.heard(Self.have("c2", [("c.mp4", 0)]))
                #expect(Self.drain(&machine) == [.part(.init(id: "c2", name: "c.mp4", offset: 0, bytes: 5))])
            } else {
                #expect(sent.isEmpty, "set aside: nothing more this session")
            }
        }
        #expect(machine.waiting.map(\.id) == ["c1", "c2"], "set aside, not forgotten")
        machine.closed()
        machine.opened()
        #expect(Self.drain(&machine) == [.announce(Self.one), .announce(Self.two)])
    }

    @Test func theDaysBudgetAndTheNetworkHoldPartsBack() {
        var machine = Machine(settings: .init(dailyBytes: 100_000, wifiOnly: true))
        machine.add(Self.one)
        machine.opened()
        _ = Self.drain(&machine)
        _ = machine.heard(Self.have("c1", [("a.mp4", 0), ("b.mp4", 0)]))
        #expect(Self.drain(&machine).isEmpty && machine.whyWaiting(segmentsWaiting: false) == .wifi)
        machine.network(wifi: true)
        #expect(Self.drain(&machine) == [.part(.init(id: "c1", name: "a.mp4", offset: 0, bytes: 65_536))])
        _ = machine.heard(Self.have("c1", [("a.mp4", 65_536)]))
        // 65 536 + 34 464 = 100 000: the second part still fits, the third does not.
        #expect(Self.drain(&machine) == [.part(.init(id: "c1", name: "a.mp4", offset: 65_536, bytes: 34_464))])
        _ = machine.heard(Self.have("c1", [("a.mp4", 100_000)]))
        #expect(Self.drain(&machine).isEmpty && machine.whyWaiting(segmentsWaiting: false) == .budget)
        #expect(machine.waiting.first?.bytesLeft == 10)
        // The next day.
        #expect(Self.drain(&machine, day: 2) == [.part(.init(id: "c1", name: "b.mp4", offset: 0, bytes: 10))])
    }
}
