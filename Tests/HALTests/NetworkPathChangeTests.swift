import Foundation
import HAL
import Logging
import Synchronization
import Testing

@Suite struct NetworkPathChangeTests {
    func after(_ change: (inout NetlinkBuilder) -> Void) -> NetworkChange {
        NetworkChange(
            old: twoInterfacesPath,
            new: parsedPath { builder in
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
        #expect(
            after { $0.address(3, "10.231.1.2", prefix: 24, type: NetlinkBuilder.delAddress) }.reasons
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
            ("the same route again", { $0.defaultRoute(NetlinkBuilder.inet, via: "10.231.1.1", dev: 3, flags: NetlinkBuilder.replace) })
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
