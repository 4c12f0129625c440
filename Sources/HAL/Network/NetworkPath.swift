internal import Glibc

/// An IPv4 or IPv6 address, in network byte order.
public struct IPAddress: Hashable, Comparable, Sendable, CustomStringConvertible {
    public enum Family: Sendable { case ipv4, ipv6 }

    /// 4 bytes (IPv4) or 16 bytes (IPv6).
    public let bytes: [UInt8]

    /// `nil` unless `bytes` holds exactly 4 or 16 bytes.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = Array(bytes)
    }

    /// Parses `10.231.1.2` or `fd00:231::2`.
    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self.bytes = withUnsafeBytes(of: v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            self.bytes = withUnsafeBytes(of: v6) { Array($0) }
            return
        }
        return nil
    }

    public var family: Family { bytes.count == 4 ? .ipv4 : .ipv6 }

    /// fe80::/10 for IPv6, 169.254.0.0/16 for IPv4.
    public var isLinkLocal: Bool {
        switch family {
        case .ipv4: bytes[0] == 169 && bytes[1] == 254
        case .ipv6: bytes[0] == 0xfe && bytes[1] & 0xc0 == 0x80
        }
    }

    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let ok = bytes.withUnsafeBytes { raw in
            inet_ntop(family == .ipv4 ? AF_INET : AF_INET6, raw.baseAddress, &text, socklen_t(text.count)) != nil
        }
        guard ok else { return bytes.map { String($0, radix: 16) }.joined(separator: ":") }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// IPv4 before IPv6, then bytewise: a stable order for logs.
    public static func < (lhs: IPAddress, rhs: IPAddress) -> Bool {
        if lhs.bytes.count != rhs.bytes.count { return lhs.bytes.count < rhs.bytes.count }
        return lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }
}

/// Where traffic to the internet leaves this machine: the default route of each address family
/// (main routing table), with the state and addresses of its interface.
///
/// Two paths are equal exactly when a connection made on one could be broken on the other: the
/// default route moved to another interface or gateway, an address of that family appeared on
/// or left that interface, or the interface went down or came up. Addresses on other interfaces
/// are not part of the path. IPv6 link-local addresses (fe80::/10) are left out: every IPv6
/// interface has one, no connection to a server uses it, and it changes only when the interface
/// itself is re-created, which already shows. Addresses still in duplicate address detection
/// (tentative) or that failed it are left out too, since they cannot be used yet; one becomes
/// part of the path when the kernel marks it usable.
public struct NetworkPath: Equatable, Sendable, CustomStringConvertible {
    /// One family's default route.
    public struct Route: Equatable, Sendable, CustomStringConvertible {
        public var interfaceName: String
        public var interfaceIndex: Int
        /// `nil` for a route straight onto the link (`ip route add default dev wg0`).
        public var gateway: IPAddress?
        /// Usable addresses of this route's family on its interface.
        public var addresses: Set<IPAddress>
        /// The interface is administratively up and has a carrier (`IFF_UP` and `IFF_RUNNING`).
        public var isUp: Bool

        public init(interfaceName: String, interfaceIndex: Int, gateway: IPAddress?, addresses: Set<IPAddress>, isUp: Bool) {
            self.interfaceName = interfaceName
            self.interfaceIndex = interfaceIndex
            self.gateway = gateway
            self.addresses = addresses
            self.isUp = isUp
        }

        /// `via 10.231.1.1 dev veth-a [10.231.1.2]`, with ` down` when the interface is down.
        public var description: String {
            let via = gateway.map { "via \($0) " } ?? ""
            let addressList = addresses.sorted().map(\.description).joined(separator: " ")
            return "\(via)dev \(interfaceName) [\(addressList)]\(isUp ? "" : " down")"
        }
    }

    public var ipv4: Route?
    public var ipv6: Route?

    public init(ipv4: Route? = nil, ipv6: Route? = nil) {
        self.ipv4 = ipv4
        self.ipv6 = ipv6
    }

    /// No default route at all.
    public static let none = NetworkPath()

    /// Some default route whose interface is up.
    public var isUsable: Bool { ipv4?.isUp == true || ipv6?.isUp == true }

    public var description: String {
        let parts = [("IPv4", ipv4), ("IPv6", ipv6)].compactMap { name, route in route.map { "\(name) \($0)" } }
        return parts.isEmpty ? "no default route" : parts.joined(separator: ", ")
    }

    /// What differs from `old`, one short sentence each, IPv4 first; empty when the paths are equal.
    public func differences(from old: NetworkPath) -> [String] {
        Self.differences("IPv4", old: old.ipv4, new: ipv4) + Self.differences("IPv6", old: old.ipv6, new: ipv6)
    }

    private static func differences(_ family: String, old: Route?, new: Route?) -> [String] {
        switch (old, new) {
        case (nil, nil):
            return []
        case (nil, let new?):
            return ["\(family) default route appeared on \(new.interfaceName)"]
        case (let old?, nil):
            return ["\(family) default route via \(old.interfaceName) is gone"]
        case (let old?, let new?):
            if old.interfaceIndex != new.interfaceIndex {
                return ["\(family) default route moved from \(old.interfaceName) to \(new.interfaceName)"]
            }
            var found: [String] = []
            if old.interfaceName != new.interfaceName {
                found.append("\(family) default interface renamed from \(old.interfaceName) to \(new.interfaceName)")
            }
            if old.gateway != new.gateway {
                let from = old.gateway.map(\.description) ?? "none", to = new.gateway.map(\.description) ?? "none"
                found.append("\(family) gateway on \(new.interfaceName) changed from \(from) to \(to)")
            }
            if old.addresses != new.addresses {
                let added = new.addresses.subtracting(old.addresses).sorted().map { "+\($0)" }
                let removed = old.addresses.subtracting(new.addresses).sorted().map { "-\($0)" }
                found.append("\(family) addresses on \(new.interfaceName) changed: \((added + removed).joined(separator: " "))")
            }
            if old.isUp != new.isUp {
                found.append("\(family) default interface \(new.interfaceName) \(new.isUp ? "came up" : "went down")")
            }
            return found
        }
    }
}

/// One change of the ``NetworkPath``: what it was, what it is, and why they differ.
public struct NetworkChange: Sendable, CustomStringConvertible {
    public let old: NetworkPath
    public let new: NetworkPath
    /// Short sentences for logs, e.g. `IPv4 default route moved from veth-a to veth-b`.
    public let reasons: [String]

    public init(old: NetworkPath, new: NetworkPath) {
        self.old = old
        self.new = new
        self.reasons = new.differences(from: old)
    }

    public var description: String { reasons.isEmpty ? "no change" : reasons.joined(separator: "; ") }
}
