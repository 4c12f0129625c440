import Foundation

/// Whether traffic leaves by a wireless LAN: what `upload.when: wifi` waits for.
public enum WirelessLAN {
    /// The path's default route (IPv4 first, else IPv6) is on a wireless LAN interface.
    public static func carries(_ path: NetworkPath) -> Bool {
        guard let route = [path.ipv4, path.ipv6].compactMap({ $0 }).first(where: \.isUp) else { return false }
        return isWireless(route.interfaceName)
    }

    /// The kernel's own word: a wireless LAN interface has `wireless/` (or `phy80211`) in its
    /// sysfs folder, and `DEVTYPE=wlan` in its `uevent`.
    public static func isWireless(_ interface: String, sysfs: String = "/sys/class/net") -> Bool {
        guard !interface.isEmpty, !interface.contains("/"), interface != ".", interface != ".." else { return false }
        let folder = sysfs + "/" + interface
        if FileManager.default.fileExists(atPath: folder + "/wireless") || FileManager.default.fileExists(atPath: folder + "/phy80211") {
            return true
        }
        guard let uevent = try? String(contentsOfFile: folder + "/uevent", encoding: .utf8) else { return false }
        return uevent.split(separator: "\n").contains("DEVTYPE=wlan")
    }
}
