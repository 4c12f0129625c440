import Agent
import Testing

/// The wall clock's rules, with the samples passed in: steps either way, and where the time comes
/// from as the kernel and chrony say.
@Suite struct ClockRulesTests {
    @Test func stepsEitherWayAreToldAndSlewingIsNot() {
        var watch = ClockRules()
        #expect(watch.sample(offset: 1000, synced: false, reference: nil) == [.source(from: "unknown", to: "none")])
        // NTP's slewing: milliseconds a second.
        #expect(watch.sample(offset: 1000.004, synced: false, reference: nil).isEmpty)
        #expect(watch.sample(offset: 1000.4, synced: false, reference: nil).isEmpty)
        // NTP arrives after boot: the clock jumps a day forward and is synchronised.
        #expect(
            watch.sample(offset: 87400.4, synced: true, reference: "ntp.example.org")
                == [.stepped(seconds: 86400), .source(from: "none", to: "ntp")])
        // chrony sets it from a GPS fix, 2 s back.
        #expect(watch.sample(offset: 87398.4, synced: true, reference: "GPS") == [.stepped(seconds: -2), .source(from: "ntp", to: "gps")])
        #expect(watch.steps == 2 && watch.lastStep == -2 && watch.source == "gps" && watch.synced == true)
    }

    @Test(arguments: [
        (true, "GPS", "gps"), (true, "PPS", "gps"), (true, "SHM0", "gps"), (true, "NMEA", "gps"), (true, "SOCK", "gps"),
        (true, "192.168.1.1", "ntp"), (true, nil, "ntp"), (false, "GPS", "none")
    ])
    func theSource(synced: Bool, reference: String?, source: String) {
        #expect(ClockRules.source(synced: synced, reference: reference) == source)
    }

    @Test func theSourceIsUnknownWhenTheKernelCannotSay() {
        #expect(ClockRules.source(synced: nil, reference: "GPS") == "unknown")
    }

    @Test func chronysTrackingLineNamesItsReference() {
        // `chronyc -c -n tracking`, with a GPS reference clock and with a server.
        #expect(
            ClockRules.chronyReference(
                "47505300,GPS,1,1795700000.123,0.000012,-0.000003,0.000020,-5.123,0.001,0.010,0.000100,0.000200,16.0,Normal\n") == "GPS")
        #expect(ClockRules.chronyReference("C0A80101,192.168.1.1,3,1795700000.1,0.0001,0,0,0,0,0,0,0,64.0,Normal") == "192.168.1.1")
        #expect(ClockRules.chronyReference("00000000,,0,0.0,0,0,0,0,0,0,0,0,0.0,Not synchronised") == nil)
        #expect(ClockRules.chronyReference("") == nil)
    }
}
