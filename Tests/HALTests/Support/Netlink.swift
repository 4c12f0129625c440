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
    static let link = hex(
        """
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
    static let address4 = hex(
        """
        5000000014000000b772026b006900000218800003000000080001000ae70102080002000ae701020b00030076657468
        2d610000080008008000000014000600ffffffffffffffff26db060026db0600
        """)
    static let address6 = hex(
        """
        480000001400000000000000000000000a4082000300000014000100fd00023100010000000000000000000214000600
        ffffffffffffffff4edb06004edb06000800080082000000
        """)
    static let linkLocal6 = hex(
        """
        500000001400000000000000000000000a4080fd0300000014000100fe80000000000000e089a8fffedef2f214000600
        fffffffffffffffffdda0600fdda0600080008008000000005000b0003000000
        """)
    static let route4 = hex(
        """
        3400000018000006b872026b0669000002000000fe0300010000000008000f00fe000000080005000ae7010108000400
        03000000
        """)
    static let route6 = hex(
        """
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

    mutating func address(
        _ index: Int32, _ text: String, prefix: UInt8, flags: UInt32 = 0x80, peer: String? = nil, type: UInt16 = newAddress
    ) {
        let family = text.contains(":") ? Self.inet6 : Self.inet
        let header = [family, prefix, UInt8(truncatingIfNeeded: flags), 0] + Self.raw(UInt32(index))
        var attributes = [Self.attribute(1, Self.address(peer ?? text)), Self.attribute(8, Self.raw(flags))]
        if peer != nil { attributes.insert(Self.attribute(2, Self.address(text)), at: 0) }
        message(type, header: header, attributes: attributes)
    }

    /// A default route in the main table (254) unless `table` says otherwise.
    mutating func defaultRoute(
        _ family: UInt8, via gateway: String?, dev index: Int32?, metric: UInt32? = nil,
        table: UInt32 = 254, routeType: UInt8 = 1, type: UInt16 = newRoute, flags: UInt16 = 0
    ) {
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
        message(
            Self.newRoute, header: header,
            attributes: [Self.attribute(15, Self.raw(UInt32(254))), Self.attribute(9, Array(nexthops.joined()))])
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
    NetworkPath.Route(
        interfaceName: name, interfaceIndex: index, gateway: gateway.flatMap(IPAddress.init),
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
