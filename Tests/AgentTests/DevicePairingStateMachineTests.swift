@testable import Agent
import Testing

/// The car's side of pairing, with time and the server's answers passed in.
@Suite struct DevicePairingStateMachineTests {
    typealias Machine = DevicePairing.StateMachine
    let credentials = DevicePairing.Credentials(deviceId: "car-x", ownerName: "Ana", accessToken: "a", refreshToken: "r", expiresIn: 600)

    @Test func theCodeIsSaidThenPolledAtTheIntervalUntilPaired() {
        var machine = Machine()
        #expect(machine.handle(.start, now: 1_000) == [.requestCode(at: 1_000)])
        #expect(
            machine.handle(.codeIssued(deviceCode: "dc", userCode: "123456789", expiresIn: 600, interval: 5), now: 2_000)
                == [.announce(userCode: "123456789"), .poll(deviceCode: "dc", at: 7_000)])
        #expect(machine.userCode == "123456789")
        #expect(machine.handle(.pollAnswered(.pending), now: 7_100) == [.poll(deviceCode: "dc", at: 12_100)])
        #expect(machine.handle(.repeatCode, now: 8_000) == [.announce(userCode: "123456789")])
        #expect(
            machine.handle(.pollAnswered(.paired(credentials)), now: 12_200) == [.store(credentials), .announcePaired(ownerName: "Ana")])
        #expect(machine.isPaired)
        // Once paired, nothing more is said or asked.
        #expect(machine.handle(.repeatCode, now: 13_000) == [])
        #expect(machine.handle(.pollAnswered(.pending), now: 13_000) == [])
    }

    @Test func slowDownAddsFiveSecondsForGood() {
        var machine = Machine()
        _ = machine.handle(.start, now: 0)
        _ = machine.handle(.codeIssued(deviceCode: "dc", userCode: "1", expiresIn: 600, interval: 5), now: 0)
        #expect(machine.handle(.pollAnswered(.slowDown), now: 5_000) == [.poll(deviceCode: "dc", at: 15_000)])
        #expect(machine.handle(.pollAnswered(.pending), now: 15_000) == [.poll(deviceCode: "dc", at: 25_000)])
        #expect(machine.handle(.pollAnswered(.slowDown), now: 25_000) == [.poll(deviceCode: "dc", at: 40_000)])
    }

    @Test func aNewCodeIsAskedForOnlyWhenTheOldOneExpires() {
        var machine = Machine()
        _ = machine.handle(.start, now: 0)
        _ = machine.handle(.codeIssued(deviceCode: "dc", userCode: "111", expiresIn: 600, interval: 5), now: 0)
        // Failed polls keep the code while it lasts...
        #expect(machine.handle(.pollAnswered(.failed), now: 300_000) == [.poll(deviceCode: "dc", at: 305_000)])
        // ...and past its life a new one is asked for, even without the server saying so.
        #expect(machine.handle(.pollAnswered(.failed), now: 600_000) == [.requestCode(at: 600_000)])
        #expect(
            machine.handle(.codeIssued(deviceCode: "dc2", userCode: "222", expiresIn: 600, interval: 5), now: 601_000)
                == [.announce(userCode: "222"), .poll(deviceCode: "dc2", at: 606_000)])
        // The server's expired_token and access_denied end a code too.
        #expect(machine.handle(.pollAnswered(.expired), now: 700_000) == [.requestCode(at: 700_000)])
        _ = machine.handle(.codeIssued(deviceCode: "dc3", userCode: "333", expiresIn: 600, interval: 5), now: 700_000)
        #expect(machine.handle(.pollAnswered(.denied), now: 705_000) == [.requestCode(at: 705_000)])
    }

    @Test func aFailedRequestIsRetriedLaterAndLaterUpToAMinute() {
        var machine = Machine()
        _ = machine.handle(.start, now: 0)
        let delays = (0..<6).map { _ -> UInt64 in
            guard case .requestCode(let at) = machine.handle(.requestFailed, now: 0).first else { return 0 }
            return at
        }
        #expect(delays == [5_000, 10_000, 20_000, 40_000, 60_000, 60_000])
    }

    @Test func theServersNumbersAreBoundedBeforeUse() {
        var machine = Machine()
        _ = machine.handle(.start, now: 0)
        #expect(
            machine.handle(.codeIssued(deviceCode: "dc", userCode: "1", expiresIn: Int.max, interval: Int.max), now: 0)
                == [.announce(userCode: "1"), .poll(deviceCode: "dc", at: 600_000)])
        // An hour at most: past it the code is renewed.
        #expect(machine.handle(.pollAnswered(.pending), now: 3_600_000) == [.requestCode(at: 3_600_000)])
        var other = Machine()
        _ = other.handle(.start, now: 0)
        #expect(
            other.handle(.codeIssued(deviceCode: "dc", userCode: "1", expiresIn: -5, interval: -1), now: 0)
                == [.announce(userCode: "1"), .poll(deviceCode: "dc", at: 5_000)])
    }
}
