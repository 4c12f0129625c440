import Foundation
import HAL
import Logging
import Synchronization
import Testing

// Byte-level tests of the rtnetlink parsing and of what counts as a change of path, plus
// read-only checks of RTNetlinkMonitor against this machine's kernel (its own network namespace,
// nothing changed). The tests that change routes run in namespaces of their own:
// NetworkNamespaceTests.

/// Messages the kernel sent (Linux 6.x, x86_64) in a namespace set up as
/// `veth-a` (index 3) 10.231.1.2/24, fd00:231:1::2/64, default via 10.231.1.1 and fd00:231:1::1.
enum Captured {
        static let link = hex("""
            d8050000100000000000000000000000000001000300000043100100000000000b000300766574682d61000008000d00
            e803000005001000060000000500110000000000050043000000000008000400dc050000080032004400000008003300
            ffff000008001b000000000008001e000000000008003d000000000008001f000200000008002800ffff000008002900
            0000010008003a000000010008003f0000000100080040000000010008003b00f8ff070008003c00ffff000008004200
            0000000008002000020000000500210001000000080023000200000008002f0001000000080030000100000006004400
            00000000060045000000000005002700000000000a000100e289a8def2f200000a000200ffffffffffff0000cc001700
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000064000700000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            0000000000000000000000000c002b000500020000000000100012000900010076657468000000000800050002000000
            0c0006006e6f71756575650030031a008c00020088000100000000000000000000000000010000000100000001000000
            010000000000000001000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000010270000e80300000000000000000000
            000000000000000001000000a0020a00080001000000008014000500ffff0000fdda0600109c0000e8030000f4000200
            0000000040000000dc05000001000000010000000100000001000000ffffffffa00f0000e803000000000000803a0900
            805101000300000058020000100000000000000001000000010000000100000060ea0000000000000000000000000000
            00000000000000000000000001000000000000000000000010270000e803000001000000000000000000000001000000
            0000000000000000010000000000000000000000000000000000000080ee360000000000000000000100000000000000
            000000000000000000000000000000000004000000000000ffff0000ffffffff01000000000000000000000000000000
            340103002600000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
            00000000000000000000000000000000000000003c000600070000000000000000000000000000000000000000000000
            000000000000000000000000000000000000000000000000000000000000000014000700000000000000000000000000
            00000000050008000000000024000e000000000000000000000000000000000000000000000000000000000000000000
            04003e8004004180
            """)
        static let address4 = hex("""
            5000000014000000b772026b006900000218800003000000080001000ae70102080002000ae701020b00030076657468
            2d610000080008008000000014000600ffffffffffffffff26db060026db0600
            """)
        static let address6 = hex("""
            480000001400000000000000000000000a4082000300000014000100fd00023100010000000000000000000214000600
            ffffffffffffffff4edb06004edb06000800080082000000
            """)
        static let linkLocal6 = hex("""
            500000001400000000000000000000000a4080fd0300000014000100fe80000000000000e089a8fffedef2f214000600
            fffffffffffffffffdda0600fdda0600080008008000000005000b0003000000
            """)
        static let route4 = hex("""
            3400000018000006b872026b0669000002000000fe0300010000000008000f00fe000000080005000ae7010108000400
            03000000
            """)
        static let route6 = hex("""
            7400000018000006b872026b086900000a000000fe0300010000000008000f00fe000000080006000004000014000500
            fd000231000100000000000000000001080004000300000024000c000000000000000000000000000000000000000000
            0000000000000000000000000500140000000000
            """)

    static func hex(_ text: String) -> [UInt8] {
        let digits = Array(text.filter(\.isHexDigit).utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
    }
}

/// Builds rtnetlink messages byte by byte, with the kernel's 4-byte alignment written out here
/// rather than taken from the code under test. Host byte order, as netlink uses.
struct NetlinkBuilder {
    // Kernel ABI numbers (linux/rtnetlink.h, if_addr.h, if_link.h, if.h).
    static let newLink: UInt16 = 16, delLink: UInt16 = 17, newAddress: UInt16 = 20, delAddress: UInt16 = 21
    static let newRoute: UInt16 = 24, delRoute: UInt16 = 25
    static let replace: UInt16 = 0x100
    static let inet: UInt8 = 2, inet6: UInt8 = 10
    static let up: UInt32 = 0x1, running: UInt32 = 0x40, lowerUp: UInt32 = 0x10000
    static let tentative: UInt32 = 0x40

    private(set) var bytes: [UInt8] = []

    static func raw<T>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }
    static func padded(_ bytes: [UInt8]) -> [UInt8] { bytes + [UInt8](repeating: 0, count: (4 - bytes.count % 4) % 4) }

    static func attribute(_ type: UInt16, _ data: [UInt8]) -> [UInt8] {
        padded(raw(UInt16(4 + data.count)) + raw(type) + data)
    }

    static func address(_ text: String) -> [UInt8] { IPAddress(text)!.bytes }

    mutating func message(_ type: UInt16, flags: UInt16 = 0, header: [UInt8], attributes: [[UInt8]]) {
        let body = Self.padded(header) + attributes.joined()
        bytes += Self.raw(UInt32(16 + body.count)) + Self.raw(type) + Self.raw(flags) + Self.raw(UInt32(0)) + Self.raw(UInt32(0)) + body
    }

    mutating func link(_ index: Int32, _ name: String, flags: UInt32 = up | running | lowerUp, type: UInt16 = newLink) {
        let header = [0, 0] + Self.raw(UInt16(1)) + Self.raw(index) + Self.raw(flags) + Self.raw(UInt32(0))
        message(type, header: header, attributes: [Self.attribute(3, Array(name.utf8) + [0])])
    }

    mutating func address(_ index: Int32, _ text: String, prefix: UInt8, flags: UInt32 = 0x80, peer: String? = nil, type: UInt16 = newAddress) {
        let family = text.contains(":") ? Self.inet6 : Self.inet
        let header = [family, prefix, UInt8(truncatingIfNeeded: flags), 0] + Self.raw(UInt32(index))
        var attributes = [Self.attribute(1, Self.address(peer ?? text)), Self.attribute(8, Self.raw(flags))]
        if peer != nil { attributes.insert(Self.attribute(2, Self.address(text)), at: 0) }
        message(type, header: header, attributes: attributes)
    }

    /// A default route in the main table (254) unless `table` says otherwise.
    mutating func defaultRoute(_ family: UInt8, via gateway: String?, dev index: Int32?, metric: UInt32? = nil,
                               table: UInt32 = 254, routeType: UInt8 = 1, type: UInt16 = newRoute, flags: UInt16 = 0) {
        let header: [UInt8] = [family, 0, 0, 0, UInt8(min(table, 252)), 3, 0, routeType] + Self.raw(UInt32(0))
        var attributes = [Self.attribute(15, Self.raw(table))]
        if let metric { attributes.append(Self.attribute(6, Self.raw(metric))) }
        if let gateway { attributes.append(Self.attribute(5, Self.address(gateway))) }
        if let index { attributes.append(Self.attribute(4, Self.raw(index))) }
        message(type, flags: flags, header: header, attributes: attributes)
    }

    /// `ip route add default nexthop via A dev X nexthop via B dev Y`.
    mutating func multipathDefaultRoute(_ family: UInt8, _ hops: [(gateway: String, index: Int32)]) {
        let header: [UInt8] = [family, 0, 0, 0, 254, 3, 0, 1] + Self.raw(UInt32(0))
        let nexthops = hops.map { hop -> [UInt8] in
            let gateway = Self.attribute(5, Self.address(hop.gateway))
            return Self.raw(UInt16(8 + gateway.count)) + [0, 0] + Self.raw(hop.index) + gateway
        }
        message(Self.newRoute, header: header, attributes: [Self.attribute(15, Self.raw(UInt32(254))), Self.attribute(9, Array(nexthops.joined()))])
    }
}

/// What a unit test of a consumer needs instead of the kernel: a dozen lines.
final class FakeNetworkMonitor: NetworkMonitor {
    private let state = Mutex<(path: NetworkPath, continuations: [AsyncStream<NetworkChange>.Continuation])>((.none, []))
    var currentPath: NetworkPath { state.withLock { $0.path } }
    func changes() -> AsyncStream<NetworkChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkChange.self)
        state.withLock { $0.continuations.append(continuation) }
        return stream
    }
    func move(to path: NetworkPath) {
        let (change, continuations) = state.withLock { state in
            defer { state.path = path }
            return (NetworkChange(old: state.path, new: path), state.continuations)
        }
        continuations.forEach { $0.yield(change) }
    }
}

func parsedPath(_ build: (inout NetlinkBuilder) -> Void) -> NetworkPath {
    var builder = NetlinkBuilder()
    build(&builder)
    var snapshot = RTNetlinkSnapshot()
    snapshot.apply(builder.bytes)
    return snapshot.path
}

func pathRoute(_ name: String, _ index: Int, via gateway: String?, _ addresses: [String], up: Bool = true) -> NetworkPath.Route {
    NetworkPath.Route(interfaceName: name, interfaceIndex: index, gateway: gateway.flatMap(IPAddress.init),
                      addresses: Set(addresses.compactMap(IPAddress.init)), isUp: up)
}

/// Two interfaces, default routes of both families on `veth-a`, and an unrelated `dummy0`.
func twoInterfaces(_ builder: inout NetlinkBuilder) {
    builder.link(1, "lo")
    builder.link(3, "veth-a")
    builder.link(5, "veth-b")
    builder.link(7, "dummy0")
    builder.address(1, "127.0.0.1", prefix: 8)
    builder.address(3, "10.231.1.2", prefix: 24)
    builder.address(3, "fd00:231:1::2", prefix: 64)
    builder.address(3, "fe80::1:2", prefix: 64)
    builder.address(5, "10.231.2.2", prefix: 24)
    builder.address(7, "10.231.9.2", prefix: 24)
    builder.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3)
    builder.defaultRoute(NetlinkBuilder.inet6, via: "fd00:231:1::1", dev: 3, metric: 1024)
}

let twoInterfacesPath = NetworkPath(
    ipv4: pathRoute("veth-a", 3, via: "10.231.1.1", ["10.231.1.2"]),
    ipv6: pathRoute("veth-a", 3, via: "fd00:231:1::1", ["fd00:231:1::2"]))

@Suite struct NetlinkParsingTests {
    @Test func capturedKernelMessagesMakeThePath() {
        var snapshot = RTNetlinkSnapshot()
        let buffer = [Captured.link, Captured.address4, Captured.address6, Captured.linkLocal6, Captured.route4, Captured.route6].flatMap { $0 }
        snapshot.apply(buffer)
        #expect(snapshot.path == NetworkPath(
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
            builder.message(NetlinkBuilder.delRoute, header: [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0], attributes: [
                NetlinkBuilder.attribute(15, NetlinkBuilder.raw(UInt32(254))),
                NetlinkBuilder.attribute(5, NetlinkBuilder.address("10.231.1.1")),
                NetlinkBuilder.attribute(4, NetlinkBuilder.raw(Int32(3))),
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
        #expect(found == NetworkPath(ipv4: pathRoute("ppp0", 9, via: nil, ["100.64.0.7"]),
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

@Suite struct NetworkPathChangeTests {
    func after(_ change: (inout NetlinkBuilder) -> Void) -> NetworkChange {
        NetworkChange(old: twoInterfacesPath, new: parsedPath { builder in
            twoInterfaces(&builder)
            change(&builder)
        })
    }

    @Test func movingTheDefaultRouteIsAChange() {
        let change = after { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.2.1", dev: 5, flags: NetlinkBuilder.replace) }
        #expect(change.reasons == ["IPv4 default route moved from veth-a to veth-b"])
        #expect(change.new.ipv4 == pathRoute("veth-b", 5, via: "10.231.2.1", ["10.231.2.2"]))
        #expect(change.new.ipv6 == twoInterfacesPath.ipv6)
    }

    @Test func aNewGatewayOnTheSameInterfaceIsAChange() {
        let change = after { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.254", dev: 3, flags: NetlinkBuilder.replace) }
        #expect(change.reasons == ["IPv4 gateway on veth-a changed from 10.231.1.1 to 10.231.1.254"])
    }

    @Test func addressesOnTheDefaultInterfaceCount() {
        #expect(after { $0.address(3, "10.231.1.3", prefix: 24) }.reasons == ["IPv4 addresses on veth-a changed: +10.231.1.3"])
        #expect(after { $0.address(3, "10.231.1.2", prefix: 24, type: NetlinkBuilder.delAddress) }.reasons
            == ["IPv4 addresses on veth-a changed: -10.231.1.2"])
        #expect(after { $0.address(3, "fd00:231:1::3", prefix: 64) }.reasons == ["IPv6 addresses on veth-a changed: +fd00:231:1::3"])
    }

    @Test func whatDoesNotTouchTheDefaultRoutesIsNoChange() {
        let unrelated: [(String, (inout NetlinkBuilder) -> Void)] = [
            ("address on another interface", { $0.address(7, "10.231.9.3", prefix: 24) }),
            ("address removed from another interface", { $0.address(5, "10.231.2.2", prefix: 24, type: NetlinkBuilder.delAddress) }),
            ("link-local address on the default interface", { $0.address(3, "fe80::99", prefix: 64) }),
            ("tentative address on the default interface", { $0.address(3, "fd00:231:1::9", prefix: 64, flags: NetlinkBuilder.tentative) }),
            ("an IPv6 address on the other uplink", { $0.address(5, "fd00:231:2::2", prefix: 64) }),
            ("another interface going down", { $0.link(5, "veth-b", flags: NetlinkBuilder.up) }),
            ("a default route in another table", { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.2.1", dev: 5, table: 100) }),
            ("a worse default route", { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.2.1", dev: 5, metric: 500) }),
            ("the same route again", { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3, flags: NetlinkBuilder.replace) }),
        ]
        for (what, change) in unrelated {
            let found = after(change)
            #expect(found.new == found.old, "\(what): \(found)")
            #expect(found.reasons.isEmpty, "\(what)")
        }
    }

    @Test func theDefaultInterfaceLosingCarrierIsAChange() {
        let change = after { $0.link(3, "veth-a", flags: NetlinkBuilder.up) }
        #expect(change.reasons == ["IPv4 default interface veth-a went down", "IPv6 default interface veth-a went down"])
        #expect(!change.new.isUsable)
    }

    @Test func aRemovedDefaultRouteIsAChange() {
        let change = after { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3, type: NetlinkBuilder.delRoute) }
        #expect(change.reasons == ["IPv4 default route via veth-a is gone"])
        #expect(change.new.ipv4 == nil)
        #expect(NetworkChange(old: change.new, new: change.old).reasons == ["IPv4 default route appeared on veth-a"])
    }

    @Test func aRemovedLinkTakesItsAddressesAlong() {
        let found = parsedPath { builder in
            twoInterfaces(&builder)
            builder.link(3, "veth-a", type: NetlinkBuilder.delLink)
        }
        #expect(found.ipv4 == pathRoute("if3", 3, via: "10.231.1.1", [], up: false))
    }

    @Test func aFakeMonitorIsEnoughForConsumers() async {
        let monitor = FakeNetworkMonitor()
        let changes = monitor.changes()
        monitor.move(to: twoInterfacesPath)
        var iterator = changes.makeAsyncIterator()
        let change = await iterator.next()
        #expect(change?.reasons == ["IPv4 default route appeared on veth-a", "IPv6 default route appeared on veth-a"])
        #expect(monitor.currentPath == twoInterfacesPath)
    }
}

/// The real kernel, read only, in this process's own network namespace.
@Suite(.serialized) struct RTNetlinkMonitorTests {
    let logger = {
        var logger = Logger(label: "test.netmon")
        logger.logLevel = .warning
        return logger
    }()

    /// The main table's IPv4 default route as /proc/net/route shows it (lowest metric).
    func procDefaultInterface() throws -> String? {
        let table = try String(contentsOfFile: "/proc/net/route", encoding: .utf8)
        let rows = table.split(separator: "\n").dropFirst().map { $0.split(whereSeparator: \.isWhitespace) }
        let defaults = rows.filter { $0.count > 7 && $0[1] == "00000000" && $0[7] == "00000000" && (Int($0[3], radix: 16) ?? 0) & 1 != 0 }
        return defaults.min { Int($0[6])! < Int($1[6])! }.map { String($0[0]) }
    }

    @Test func currentPathAgreesWithProcNetRoute() throws {
        let monitor = try RTNetlinkMonitor(logger: logger)
        defer { monitor.close() }
        #expect(monitor.currentPath.ipv4?.interfaceName == (try procDefaultInterface()))
    }

    /// Event descriptors of this process (the monitor wakes its thread with one; SwiftNIO's event
    /// loops have theirs too).
    static func eventDescriptors() -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == "anon_inode:[eventfd]" }.count
    }

    /// Sockets of this process that are NETLINK_ROUTE sockets (protocol 0 in /proc/net/netlink).
    static func routeSockets() -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let targets: [String] = fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
        let inodes = Set(targets.filter { $0.hasPrefix("socket:[") }.map { String($0.dropFirst(8).dropLast()) })
        let table = (try? String(contentsOfFile: "/proc/self/net/netlink", encoding: .utf8)) ?? ""
        // Columns: sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode; Eth 0 is NETLINK_ROUTE.
        let rows: [[Substring]] = table.split(separator: "\n").dropFirst().map { $0.split(whereSeparator: \.isWhitespace) }
        return rows.filter { row in row.count > 9 && row[1] == "0" && inodes.contains(String(row[9])) }.count
    }

    /// Threads named as the monitor names its own.
    static func monitorThreads() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)) == "netmon\n" }.count
    }

    /// The thread names itself as it starts, a moment after the monitor is made.
    static func monitorThreadsOnceStarted() async throws -> Int {
        for _ in 0..<1000 where monitorThreads() == 0 { try await Task.sleep(for: .milliseconds(1)) }
        return monitorThreads()
    }

    @Test func openingAndClosingLeaksNoDescriptorAndNoThread() async throws {
        let events = Self.eventDescriptors(), sockets = Self.routeSockets()
        do {
            let monitor = try RTNetlinkMonitor(logger: logger)
            #expect(Self.routeSockets() == sockets + 2)
            #expect(try await Self.monitorThreadsOnceStarted() == 1)
            monitor.close()
        }
        for round in 0..<300 {
            let monitor = try RTNetlinkMonitor(logger: logger)
            switch round % 3 {
            case 0:
                monitor.close()
                monitor.close()
            case 1:
                // A consumer that goes away first; then the last reference ends the monitor.
                let consumer = Task { for await _ in monitor.changes() {} }
                consumer.cancel()
                await consumer.value
            default:
                _ = monitor.changes()
            }
        }
        #expect(Self.routeSockets() == sockets)
        #expect(Self.monitorThreads() == 0)
        // Its two sockets are counted exactly above; its eventfd is one of a kind that only event
        // loops share. Other tests run at the same time and open and close files of every other
        // kind by the dozen, so only eventfds are counted here, and only growth: 300 rounds that
        // each leaked one would show far above this margin.
        #expect(Self.eventDescriptors() - events < 50, "eventfds before: \(events), after: \(Self.eventDescriptors())")
    }

    @Test func aMonitorKeptOnlyByItsStreamStopsWhenTheConsumerGoesAway() async throws {
        let sockets = Self.routeSockets()
        let started = Mutex(false)
        let consumer = Task { [logger] in
            let changes = try RTNetlinkMonitor(logger: logger).changes()
            started.withLock { $0 = true }
            for await _ in changes {}
        }
        while !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
        #expect(try await Self.monitorThreadsOnceStarted() == 1)
        #expect(Self.routeSockets() == sockets + 2)
        consumer.cancel()
        try await consumer.value
        #expect(Self.monitorThreads() == 0)
        #expect(Self.routeSockets() == sockets)
    }

    @Test func closingEndsEveryStream() async throws {
        let monitor = try RTNetlinkMonitor(logger: logger)
        let consumers = (0..<3).map { _ in
            let changes = monitor.changes()
            return Task { for await _ in changes {} }
        }
        monitor.close()
        for consumer in consumers { await consumer.value }
        var late = monitor.changes().makeAsyncIterator()
        #expect(await late.next() == nil)
        #expect(Self.monitorThreads() == 0)
    }
}
