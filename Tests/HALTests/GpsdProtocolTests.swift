import Foundation
@testable import HAL
import Testing

/// gpsd's JSON as gpsd 3.22 wrote it here (fed NMEA over UDP), and what a peer could send
/// instead: every field checked, every line bounded.
@Suite struct GpsdProtocolTests {
    /// Lines gpsd 3.22 sent a client after `?WATCH`, as they came.
    static let recorded = [
        #"{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}"#,
        #"{"class":"DEVICES","devices":[{"class":"DEVICE","path":"udp://127.0.0.1:29471","driver":"NMEA0183","activated":"2026-11-26T08:05:51.785Z","flags":1}]}"#,
        #"{"class":"WATCH","enable":true,"json":true,"nmea":false,"raw":0,"scaled":false,"timing":false,"split24":false,"pps":false}"#,
        #"{"class":"TPV","device":"udp://127.0.0.1:29471","mode":3,"time":"2026-11-26T08:10:11.000Z","ept":0.005,"lat":37.566500000,"lon":126.978000000,"altHAE":53.0000,"altMSL":35.0000,"alt":35.0000,"epv":27.600,"track":91.5000,"magtrack":82.9980,"magvar":-8.5,"speed":13.890,"climb":0.000,"epc":55.20,"geoidSep":18.000,"eph":17.100,"sep":28.500}"#
    ]

    static func parse(_ line: String) -> GpsdReport? { GpsdReport.parse(Array(line.utf8)) }

    @Test func gpsdsOwnLinesAreRead() throws {
        #expect(Self.parse(Self.recorded[0]) == .version(release: "3.22", protoMajor: 3, protoMinor: 14))
        #expect(Self.parse(Self.recorded[1]) == .devices(1))
        #expect(Self.parse(Self.recorded[2]) == .watch(enabled: true))
        guard case .fix(let fix)? = Self.parse(Self.recorded[3]) else { Issue.record("not a fix"); return }
        #expect(fix.mode == 3 && fix.lat == 37.5665 && fix.lon == 126.978 && fix.altitude == 53 && fix.speed == 13.89 && fix.track == 91.5)
        #expect(fix.time == Date(timeIntervalSince1970: 1_795_680_611))
        #expect(fix.hasPosition && fix.modeName == "3d")
        #expect(Self.parse(#"{"class":"SKY","satellites":[]}"#) == .other("SKY"))
        #expect(Self.parse(#"{"class":"ERROR","message":"Unrecognized request '?FOO'"}"#) == .error("Unrecognized request '?FOO'"))
    }

    @Test func noFixAndFieldsOutOfRangeAreLeftOut() throws {
        guard case .fix(let blind)? = Self.parse(#"{"class":"TPV","mode":1,"time":"2026-11-26T08:10:11.000Z"}"#) else {
            Issue.record("no"); return
        }
        #expect(blind.mode == 1 && !blind.hasPosition && blind.modeName == "no fix")
        guard
            case .fix(let odd)? = Self.parse(
                #"{"class":"TPV","mode":7,"lat":91,"lon":"east","speed":-3,"track":360,"alt":1e300,"time":"yesterday"}"#)
        else { Issue.record("no"); return }
        #expect(odd == GPSFix(mode: 0, time: nil, lat: nil, lon: nil, altitude: nil, speed: nil, track: 0))
        guard case .fix(let flags)? = Self.parse(#"{"class":"TPV","mode":true,"lat":true,"lon":false}"#) else { Issue.record("no"); return }
        #expect(flags.mode == 0 && flags.lat == nil && flags.lon == nil)
        for line in [
            "", "not json", "[1,2]", #"{"mode":3}"#, #"{"class":3}"#, "{" + String(repeating: " ", count: GpsdLineReader.maxLine) + "}"
        ] {
            #expect(Self.parse(line) == nil, "\(line.prefix(40))")
        }
    }

    @Test func linesAreCutAndBounded() {
        var reader = GpsdLineReader()
        #expect(reader.append(Array("{\"a\":1}\r\n{\"b\"".utf8)) == [Array("{\"a\":1}".utf8)])
        #expect(reader.append(Array(":2}\n".utf8)) == [Array("{\"b\":2}".utf8)])
        // A line over the limit is dropped whole, however it arrives, and the next one is read.
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: GpsdLineReader.maxLine + 10)
        #expect(reader.append(long[..<9000]).isEmpty)
        #expect(reader.append(long[9000...]).isEmpty)
        #expect(reader.append(Array("tail\nnext\n".utf8)) == [Array("next".utf8)])
        #expect(reader.dropped == 1)
    }

    @Test(arguments: [
        ("127.0.0.1:2947", "127.0.0.1", 2947), ("gps.local", "gps.local", 2947), ("[::1]:3000", "::1", 3000), ("[::1]", "::1", 2947)
    ])
    func addresses(text: String, host: String, port: Int) throws {
        let address = try #require(GpsdClient.address(text))
        #expect(address.host == host && address.port == port)
    }

    @Test func badAddressesAreRefused() {
        for text in ["", ":2947", "host:", "host:0", "host:65536", "host:x", "a:b:c", "[::1", "[]:1", "[::1]x"] {
            #expect(GpsdClient.address(text) == nil, "\(text)")
        }
    }
}
