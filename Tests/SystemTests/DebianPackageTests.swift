import Foundation
import TestSupport
import Testing

/// deploy/build-deb.sh, packaging the binary just built; dpkg-deb reads the result.
@Suite struct DebianPackageTests {
    @Test func thePackageHoldsTheAgentTheUnitTheConfigAsConffileAndTheMaintainerScripts() async throws {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("deb-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }
        let built = try await Command.executeAsync(
            "/usr/bin/env",
            [
                "AGENT_BIN=\(RecordCommandTests.agent)", "DEB_OUT=\(out.path)", "DEB_COMPRESSION=none", "bash",
                RecordCommandTests.repo.appendingPathComponent("deploy/build-deb.sh").path
            ])
        #expect(built.status == 0, "\(built.stderr)")
        let deb = built.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(deb.hasSuffix(".deb"))

        let contents = try await Command.executeAsync("dpkg-deb", ["--contents", deb])
        let listed = contents.stdout.split(separator: "\n").map { line in
            (mode: String(line.prefix(10)), path: String(line.split(separator: " ").last ?? ""))
        }
        // Units and rules where this release's systemd and udev say (/lib on Debian 12, /usr/lib on 13).
        let unitDir = try await Command.executeAsync("pkg-config", ["--variable=systemdsystemunitdir", "systemd"])
        let udevDir = try await Command.executeAsync("pkg-config", ["--variable=udevdir", "udev"])
        let unit = "." + unitDir.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + "/dashcam-agent.service"
        let rules = "." + udevDir.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + "/rules.d/70-dashcam-agent.rules"
        #expect(unitDir.status == 0 && udevDir.status == 0, "pkg-config: \(unitDir.stderr) \(udevDir.stderr)")
        for (mode, path) in [
            ("-rwxr-xr-x", "./usr/bin/dashcam-agent"), ("-rw-r--r--", "./usr/lib/dashcam-agent/libRoadVision.so"), ("-rw-r--r--", unit),
            ("-rw-r--r--", "./etc/dashcam-agent/agent.yaml"), ("-rw-r--r--", rules),
            ("-rw-r--r--", "./usr/share/dashcam-agent/boards/raspberry-pi-4.yaml"),
            ("-rw-r--r--", "./usr/share/dashcam-agent/chrony/dashcam-gps.conf"),
            ("-rw-r--r--", "./usr/share/dashcam-agent/boards/raspberry-pi-4-usb-webcam.yaml"),
            ("-rw-r--r--", "./usr/share/dashcam-agent/default.yaml"),
            ("-rw-r--r--", "./usr/share/doc/dashcam-agent/copyright"),
            ("-rw-r--r--", "./usr/share/doc/dashcam-agent/changelog.gz"),
            ("-rw-r--r--", "./usr/share/doc/dashcam-agent/README.Debian"),
            ("-rw-r--r--", "./usr/share/lintian/overrides/dashcam-agent")
        ] {
            #expect(listed.contains { $0.mode == mode && $0.path == path }, "\(mode) \(path) in \(contents.stdout)")
        }
        #expect(!listed.contains { $0.path.hasSuffix("/token") }, "the token file is made on the board, never shipped")
        #expect(contents.stdout.contains("root/root"), "files owned by root")

        let control = try await Command.executeAsync("dpkg-deb", ["--field", deb, "Package", "Version", "Depends", "Installed-Size"])
        #expect(control.stdout.contains("Package: dashcam-agent"))
        // Each library's package is the one this release ships it in (Debian 12: libgpiod2 and
        // libavcodec59; Debian 13: libgpiod3 and libavcodec61), as dpkg itself says.
        let depends = control.stdout.split(separator: "\n").first { $0.hasPrefix("Depends: ") } ?? ""
        let packages = Set(depends.dropFirst(9).split(separator: ",").map { String($0.split(separator: " ")[0]) })
        for library in ["libgpiod.so.*", "libavcodec.so.*", "libespeak-ng.so.*", "libc.so.6", "libopencv_objdetect.so.*"] {
            let owner = try await Command.executeAsync("dpkg-query", ["--search", "*/\(library)"])
            let owners = Set(owner.stdout.split(separator: "\n").compactMap { $0.split(separator: ":").first.map(String.init) })
            #expect(!owners.isDisjoint(with: packages), "\(library) comes from \(owners); Depends: \(depends)")
        }
        // The binary is stripped in the package: far smaller than the one built.
        let installed = control.stdout.split(separator: "\n").first { $0.hasPrefix("Installed-Size: ") }.flatMap { Int($0.dropFirst(16)) }
        let binary = try FileManager.default.attributesOfItem(atPath: RecordCommandTests.agent)[.size] as? Int ?? 0
        #expect(installed.map { $0 * 1024 < binary } == true, "Installed-Size \(installed ?? -1) KiB, binary \(binary) bytes")
        let scripts = FileManager.default.temporaryDirectory.appendingPathComponent("deb-control-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scripts) }
        let extracted = try await Command.executeAsync("dpkg-deb", ["--control", deb, scripts.path])
        #expect(extracted.status == 0)
        let conffiles = try String(contentsOf: scripts.appendingPathComponent("conffiles"), encoding: .utf8)
        #expect(conffiles == "/etc/dashcam-agent/agent.yaml\n")
        let postinst = try String(contentsOf: scripts.appendingPathComponent("postinst"), encoding: .utf8)
        #expect(
            postinst.contains("adduser --system") && postinst.contains("install -m 0600") && postinst.contains("deb-systemd-helper enable"))
    }
}
