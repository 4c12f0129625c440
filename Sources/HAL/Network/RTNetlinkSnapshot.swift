internal import CShims
internal import Glibc

/// The links, addresses and default routes that rtnetlink messages describe, and the
/// ``NetworkPath`` they make.
///
/// ``RTNetlinkMonitor`` fills a new one from a full dump each time; ``apply(_:)-(UnsafeRawBufferPointer)``
/// also takes notifications one by one (new, changed and deleted objects), which is what the
/// tests feed it. Messages are in host byte order, as the kernel sends them.
public struct RTNetlinkSnapshot: Sendable {
    struct Link: Equatable {
        var index: Int32
        var name: String
        var flags: UInt32

        var isUp: Bool { flags & UInt32(IFF_UP) != 0 && flags & UInt32(IFF_RUNNING) != 0 }
    }

    struct Address: Equatable {
        var interfaceIndex: Int32
        var address: IPAddress
        var prefixLength: UInt8
        var flags: UInt32

        /// Not in duplicate address detection, and not IPv6 link-local.
        var isUsable: Bool {
            flags & UInt32(IFA_F_TENTATIVE | IFA_F_DADFAILED) == 0 && !(address.family == .ipv6 && address.isLinkLocal)
        }

        func sameObject(as other: Address) -> Bool {
            interfaceIndex == other.interfaceIndex && address == other.address && prefixLength == other.prefixLength
        }
    }

    /// A route to 0.0.0.0/0 or ::/0; other routes are not kept.
    struct Route: Equatable {
        var family: UInt8
        var table: UInt32
        var type: UInt8
        var flags: UInt32
        var tos: UInt8
        var priority: UInt32
        var outputInterface: Int32?
        var gateway: IPAddress?

        /// What the kernel replaces on `ip route replace`.
        func sameSlot(as other: Route) -> Bool {
            family == other.family && table == other.table && tos == other.tos && priority == other.priority
        }
    }

    private(set) var links: [Int32: Link] = [:]
    private(set) var addresses: [Address] = []
    private(set) var routes: [Route] = []

    public init() {}

    /// Applies every link, address and route message in `bytes` (one buffer as `recv` returns
    /// it: messages back to back, each aligned to 4 bytes); other messages are skipped, and so is
    /// whatever follows a malformed header.
    public mutating func apply(_ bytes: UnsafeRawBufferPointer) {
        for message in NetlinkMessages(bytes) {
            apply(message)
        }
    }

    public mutating func apply(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { apply($0) }
    }

    /// The default route of each family in the main table: the unicast one with the lowest
    /// metric whose nexthop is not dead (the first one on a tie, as the kernel does), with its
    /// interface's usable addresses of the same family.
    public var path: NetworkPath {
        NetworkPath(ipv4: defaultRoute(family: UInt8(AF_INET)), ipv6: defaultRoute(family: UInt8(AF_INET6)))
    }

    private func defaultRoute(family: UInt8) -> NetworkPath.Route? {
        let candidates = routes.filter {
            $0.family == family && $0.table == RT_TABLE_MAIN.rawValue && $0.type == UInt8(RTN_UNICAST)
                && $0.flags & UInt32(RTNH_F_DEAD) == 0 && $0.outputInterface != nil
        }
        guard let best = candidates.min(by: { $0.priority < $1.priority }), let index = best.outputInterface else {
            return nil
        }
        let link = links[index]
        let addressFamily: IPAddress.Family = family == UInt8(AF_INET) ? .ipv4 : .ipv6
        let usable = addresses.filter { $0.interfaceIndex == index && $0.address.family == addressFamily && $0.isUsable }
        return NetworkPath.Route(
            interfaceName: link?.name ?? "if\(index)", interfaceIndex: Int(index), gateway: best.gateway,
            addresses: Set(usable.map(\.address)), isUp: link?.isUp ?? false)
    }

    // MARK: - Messages

    mutating func apply(_ message: NetlinkMessage) {
        switch Int(message.type) {
        case Int(RTM_NEWLINK), Int(RTM_DELLINK):
            guard let link = Self.link(message.payload) else { return }
            if Int(message.type) == Int(RTM_NEWLINK) {
                links[link.index] = link
            } else {
                links[link.index] = nil
                addresses.removeAll { $0.interfaceIndex == link.index }
            }
        case Int(RTM_NEWADDR), Int(RTM_DELADDR):
            guard let address = Self.address(message.payload) else { return }
            addresses.removeAll { $0.sameObject(as: address) }
            if Int(message.type) == Int(RTM_NEWADDR) { addresses.append(address) }
        case Int(RTM_NEWROUTE), Int(RTM_DELROUTE):
            guard let route = Self.defaultRoute(message.payload) else { return }
            if Int(message.type) == Int(RTM_NEWROUTE) {
                if message.flags & UInt16(NLM_F_REPLACE) != 0 {
                    routes.removeAll { $0.sameSlot(as: route) }
                } else {
                    routes.removeAll { $0 == route }
                }
                routes.append(route)
            } else {
                routes.removeAll {
                    $0.sameSlot(as: route) && $0.outputInterface == route.outputInterface && $0.gateway == route.gateway
                }
            }
        default:
            return
        }
    }

    /// `struct ifinfomsg` and its attributes.
    static func link(_ payload: UnsafeRawBufferPointer) -> Link? {
        guard payload.count >= MemoryLayout<ifinfomsg>.size else { return nil }
        let header = payload.loadUnaligned(as: ifinfomsg.self)
        var name = "if\(header.ifi_index)"
        for attribute in NetlinkAttributes(payload, headerSize: MemoryLayout<ifinfomsg>.size)
        where attribute.type == UInt16(IFLA_IFNAME) {
            name = String(decoding: attribute.data.prefix { $0 != 0 }, as: UTF8.self)
        }
        return Link(index: header.ifi_index, name: name, flags: header.ifi_flags)
    }

    /// `struct ifaddrmsg` and its attributes. `IFA_LOCAL` is the address itself where both are
    /// given (on a point-to-point link `IFA_ADDRESS` is the peer); `IFA_FLAGS` holds all flags,
    /// `ifa_flags` only the first eight.
    static func address(_ payload: UnsafeRawBufferPointer) -> Address? {
        guard payload.count >= MemoryLayout<ifaddrmsg>.size else { return nil }
        let header = payload.loadUnaligned(as: ifaddrmsg.self)
        var local: IPAddress?, address: IPAddress?
        var flags = UInt32(header.ifa_flags)
        for attribute in NetlinkAttributes(payload, headerSize: MemoryLayout<ifaddrmsg>.size) {
            switch Int(attribute.type) {
            case Int(IFA_LOCAL): local = IPAddress(bytes: attribute.data)
            case Int(IFA_ADDRESS): address = IPAddress(bytes: attribute.data)
            case Int(IFA_FLAGS): flags = attribute.uint32 ?? flags
            default: break
            }
        }
        guard let chosen = local ?? address, chosen.family == (Int32(header.ifa_family) == AF_INET ? .ipv4 : .ipv6) else {
            return nil
        }
        return Address(
            interfaceIndex: Int32(bitPattern: header.ifa_index), address: chosen,
            prefixLength: header.ifa_prefixlen, flags: flags)
    }

    /// `struct rtmsg` and its attributes, for IPv4 and IPv6 routes with a zero-length
    /// destination. A multipath route counts as its first nexthop.
    static func defaultRoute(_ payload: UnsafeRawBufferPointer) -> Route? {
        guard payload.count >= MemoryLayout<rtmsg>.size else { return nil }
        let header = payload.loadUnaligned(as: rtmsg.self)
        let family = Int32(header.rtm_family)
        guard family == AF_INET || family == AF_INET6, header.rtm_dst_len == 0 else { return nil }
        var route = Route(
            family: header.rtm_family, table: UInt32(header.rtm_table), type: header.rtm_type,
            flags: header.rtm_flags, tos: header.rtm_tos, priority: 0)
        for attribute in NetlinkAttributes(payload, headerSize: MemoryLayout<rtmsg>.size) {
            switch attribute.type {
            case UInt16(RTA_TABLE.rawValue): route.table = attribute.uint32 ?? route.table
            case UInt16(RTA_PRIORITY.rawValue): route.priority = attribute.uint32 ?? 0
            case UInt16(RTA_OIF.rawValue): route.outputInterface = attribute.uint32.map { Int32(bitPattern: $0) }
            case UInt16(RTA_GATEWAY.rawValue): route.gateway = IPAddress(bytes: attribute.data)
            case UInt16(RTA_MULTIPATH.rawValue):
                if route.outputInterface == nil, let first = firstNexthop(attribute.data) {
                    route.outputInterface = first.interface
                    route.gateway = first.gateway
                    route.flags |= first.flags
                }
            default: break
            }
        }
        return route
    }

    /// The first `struct rtnexthop` of an `RTA_MULTIPATH` attribute, with its own attributes.
    private static func firstNexthop(_ data: UnsafeRawBufferPointer) -> (interface: Int32, gateway: IPAddress?, flags: UInt32)? {
        guard data.count >= MemoryLayout<rtnexthop>.size else { return nil }
        let nexthop = data.loadUnaligned(as: rtnexthop.self)
        let length = Int(nexthop.rtnh_len)
        guard length >= MemoryLayout<rtnexthop>.size, length <= data.count else { return nil }
        let own = data.bytes(0..<length)
        let gateway = NetlinkAttributes(own, headerSize: Int(dashcam_rtnh_align(UInt32(MemoryLayout<rtnexthop>.size))), aligned: true)
            .first { $0.type == UInt16(RTA_GATEWAY.rawValue) }
            .flatMap { IPAddress(bytes: $0.data) }
        return (nexthop.rtnh_ifindex, gateway, UInt32(nexthop.rtnh_flags))
    }
}

// MARK: - Walking netlink buffers

/// One message: its header's fields and what follows the header (`NLMSG_DATA`).
struct NetlinkMessage {
    var type: UInt16
    var flags: UInt16
    var sequence: UInt32
    var payload: UnsafeRawBufferPointer
}

/// The messages of one buffer (`NLMSG_OK` / `NLMSG_NEXT`); stops at the first malformed header.
struct NetlinkMessages: Sequence, IteratorProtocol {
    private var rest: UnsafeRawBufferPointer

    init(_ buffer: UnsafeRawBufferPointer) { rest = buffer }

    mutating func next() -> NetlinkMessage? {
        guard rest.count >= MemoryLayout<nlmsghdr>.size else { return nil }
        let header = rest.loadUnaligned(as: nlmsghdr.self)
        let length = Int(header.nlmsg_len)
        let headerLength = Int(dashcam_NLMSG_HDRLEN)
        guard length >= headerLength, length <= rest.count else {
            rest = UnsafeRawBufferPointer(start: nil, count: 0)
            return nil
        }
        let payload = rest.bytes(headerLength..<length)
        rest = rest.bytes(from: Int(dashcam_nlmsg_align(UInt32(length))))
        return NetlinkMessage(type: header.nlmsg_type, flags: header.nlmsg_flags, sequence: header.nlmsg_seq, payload: payload)
    }
}

/// One attribute: its type (without the nested and byte-order bits) and its data (`RTA_DATA`).
struct NetlinkAttribute {
    var type: UInt16
    var data: UnsafeRawBufferPointer

    var uint32: UInt32? { data.count >= 4 ? data.loadUnaligned(as: UInt32.self) : nil }
}

/// The attributes after a family header (`IFA_RTA`, `IFLA_RTA`, `RTM_RTA`: the header's size
/// aligned with `NLMSG_ALIGN`), walked with `RTA_OK` / `RTA_NEXT`.
struct NetlinkAttributes: Sequence, IteratorProtocol {
    private var rest: UnsafeRawBufferPointer

    /// `aligned`: `headerSize` is already the offset of the first attribute.
    init(_ payload: UnsafeRawBufferPointer, headerSize: Int, aligned: Bool = false) {
        let start = aligned ? headerSize : Int(dashcam_nlmsg_align(UInt32(headerSize)))
        rest = payload.bytes(from: start)
    }

    mutating func next() -> NetlinkAttribute? {
        guard rest.count >= MemoryLayout<rtattr>.size else { return nil }
        let header = rest.loadUnaligned(as: rtattr.self)
        let length = Int(header.rta_len)
        let dataOffset = Int(dashcam_RTA_HDRLEN)
        guard length >= dataOffset, length <= rest.count else {
            rest = UnsafeRawBufferPointer(start: nil, count: 0)
            return nil
        }
        let data = rest.bytes(dataOffset..<length)
        rest = rest.bytes(from: Int(dashcam_rta_align(UInt32(length))))
        let type = header.rta_type & ~UInt16(NLA_F_NESTED | NLA_F_NET_BYTEORDER)
        return NetlinkAttribute(type: type, data: data)
    }
}

extension UnsafeRawBufferPointer {
    /// Bytes `range` of this buffer, as a buffer of their own.
    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: self[range])
    }

    /// The bytes from `start` on (none if `start` is past the end; the last message or attribute
    /// of a buffer need not be padded to its alignment).
    func bytes(from start: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: self[Swift.min(start, count)...])
    }
}
