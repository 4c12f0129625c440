import Foundation
import HAL
import Logging
import Synchronization
import Testing

let twoInterfacesPath = NetworkPath(
    ipv4: pathRoute("veth-a", 3, via: "10.231.1.1", ["10.231.1.2"]),
    ipv6: pathRoute("veth-a", 3, via: "fd00:231:1::1", ["fd00:231:1::2"]))

@Suite struct NetlinkParsingTests {
    @Test func capturedKernelMessagesMakeThePath() {
        var snapshot = RTNetlinkSnapshot()
        let buffer = [Captured.link, Captured.address4, Captured.address6, Captured.linkLocal6, Captured.route4, Captured.route6].flatMap {
            $0
        }
        snapshot.apply(buffer)
        #expect(
            snapshot.path
                == NetworkPath(
                    ipv4: pathRoute("veth-a", 3, via: "10.231.1.1", ["10.231.1.2"]),
                    ipv6: pathRoute("veth-a", 3, via: "fd00:231:1::1", ["fd00:231:1::2"])))
    }

    @Test func aRouteWithoutItsLinkMessageStillNamesTheInterfaceIndex() {
        var snapshot = RTNetlinkSnapshot()
        snapshot.apply(Captured.route4 + Captured.address4)
        #expect(snapshot.path == NetworkPath(ipv4: pathRoute("if3", 3, via: "10.231.1.1", ["10.231.1.2"], up: false)))
    }

    @Test func builtMessagesMakeThePath() {
        #expect(parsedPath(twoInterfaces) == twoInterfacesPath)
    }

    @Test func namesOfEveryLengthAreAlignedRight() {
        // IFLA_IFNAME lengths 2...16 with the NUL: every padding from 0 to 3 bytes.
        for length in 1...15 {
            let name = String(repeating: "x", count: length)
            let found = parsedPath { builder in
                builder.link(3, name)
                builder.link(4, "other")
                builder.address(3, "10.231.1.2", prefix: 24)
                builder.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3)
            }
            #expect(found.ipv4?.interfaceName == name)
            #expect(found.ipv4?.addresses == [IPAddress("10.231.1.2")!])
        }
    }

    @Test func aLastMessageWithoutTrailingPaddingIsRead() {
        var builder = NetlinkBuilder()
        builder.address(3, "10.231.1.2", prefix: 24)
        builder.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3)
        var link = NetlinkBuilder()
        link.link(3, "ab")  // IFLA_IFNAME "ab\0": rta_len 7, then one byte of padding, left out here
        var last = Array(link.bytes.dropLast())
        last.replaceSubrange(0..<4, with: NetlinkBuilder.raw(UInt32(last.count)))
        var snapshot = RTNetlinkSnapshot()
        snapshot.apply(builder.bytes + last)
        #expect(snapshot.path == NetworkPath(ipv4: pathRoute("ab", 3, via: "10.231.1.1", ["10.231.1.2"])))
    }

    @Test func theLowestMetricWinsAndOtherTablesAndTypesDoNot() {
        let found = parsedPath { builder in
            twoInterfaces(&builder)
            builder.defaultRoute(NetlinkBuilder.inet6, via: "fd00:231:2::1", dev: 5, metric: 100)
            builder.defaultRoute(NetlinkBuilder.inet, via: "10.231.2.1", dev: 5, metric: 0, table: 1000)
            builder.defaultRoute(NetlinkBuilder.inet, via: nil, dev: nil, metric: 0, routeType: 7)  // unreachable
        }
        #expect(found.ipv4 == twoInterfacesPath.ipv4)
        #expect(found.ipv6 == pathRoute("veth-b", 5, via: "fd00:231:2::1", []))
    }

    @Test func aMultipathRouteCountsAsItsFirstNexthop() {
        let found = parsedPath { builder in
            twoInterfaces(&builder)
            builder.message(
                NetlinkBuilder.delRoute, header: [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0],
                attributes: [
                    NetlinkBuilder.attribute(15, NetlinkBuilder.raw(UInt32(254))),
                    NetlinkBuilder.attribute(5, NetlinkBuilder.address("10.231.1.1")),
                    NetlinkBuilder.attribute(4, NetlinkBuilder.raw(Int32(3)))
                ])
            builder.multipathDefaultRoute(NetlinkBuilder.inet, [("10.231.2.1", 5), ("10.231.1.1", 3)])
        }
        #expect(found.ipv4 == pathRoute("veth-b", 5, via: "10.231.2.1", ["10.231.2.2"]))
    }

    @Test func pointToPointAddressesAreTheLocalEndAndTentativeOnesWait() {
        let found = parsedPath { builder in
            builder.link(9, "ppp0")
            builder.address(9, "100.64.0.7", prefix: 32, peer: "100.64.0.1")
            builder.address(9, "fd00:231:7::7", prefix: 64, flags: 0x80 | NetlinkBuilder.tentative)
            builder.address(9, "fd00:231:7::8", prefix: 64)
            builder.defaultRoute(NetlinkBuilder.inet, via: nil, dev: 9)
            builder.defaultRoute(NetlinkBuilder.inet6, via: nil, dev: 9, metric: 1024)
        }
        #expect(
            found
                == NetworkPath(
                    ipv4: pathRoute("ppp0", 9, via: nil, ["100.64.0.7"]),
                    ipv6: pathRoute("ppp0", 9, via: nil, ["fd00:231:7::8"])))
    }

    @Test func truncatedAndGarbledBuffersNeitherCrashNorInvent() {
        var builder = NetlinkBuilder()
        twoInterfaces(&builder)
        let whole = builder.bytes
        for cut in 0...whole.count {
            var snapshot = RTNetlinkSnapshot()
            snapshot.apply(Array(whole[..<cut]))
            // Whatever a prefix holds, it is part of the whole path.
            if let ipv4 = snapshot.path.ipv4 { #expect(ipv4.addresses.isSubset(of: [IPAddress("10.231.1.2")!])) }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var bytes = whole
            for _ in 0..<8 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = .random(in: 0...255, using: &generator) }
            var snapshot = RTNetlinkSnapshot()
            snapshot.apply(bytes)
            _ = snapshot.path
        }
    }

    @Test func addressesPrintAndParse() {
        #expect(IPAddress("10.231.1.2")?.description == "10.231.1.2")
        #expect(IPAddress("fd00:231:0:0::2")?.description == "fd00:231::2")
        #expect(IPAddress("fe80::1")?.isLinkLocal == true)
        #expect(IPAddress("fd00::1")?.isLinkLocal == false)
        #expect(IPAddress("veth-a") == nil)
        #expect(IPAddress(bytes: [1, 2, 3]) == nil)
    }
}
