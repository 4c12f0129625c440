import Foundation
import TestSupport
import Testing

/// deploy/dashcam-agent.service, checked by systemd's own analyzer.
@Suite struct ServiceUnitTests {
    static let unit = RecordCommandTests.repo.appendingPathComponent("deploy/dashcam-agent.service")

    /// The unit with ExecStart pointing at the binary just built (verify checks that it exists).
    func unitForThisBuild() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let text = try String(contentsOf: Self.unit, encoding: .utf8)
        #expect(text.contains("ExecStart=/usr/bin/dashcam-agent record"))
        let copy = folder.appendingPathComponent("dashcam-agent.service")
        try text.replacingOccurrences(of: "/usr/bin/dashcam-agent", with: RecordCommandTests.agent).write(to: copy, atomically: true, encoding: .utf8)
        return copy
    }

    @Test func theUnitVerifiesClean() async throws {
        let copy = try unitForThisBuild()
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let result = try await Command.executeAsync("systemd-analyze", ["verify", copy.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "verify printed: \(result.stderr)")
    }

    @Test func theExposureIsAtMostTwo() async throws {
        let copy = try unitForThisBuild()
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        let result = try await Command.executeAsync("systemd-analyze", ["security", "--offline=true", "--no-pager", copy.path])
        let line = try #require(result.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(result.stdout)\(result.stderr)")
        let figure = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(figure <= 2.0, "\(line)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        print("systemd-analyze security: \(line)")
    }

    @Test func theUnitWaitsForReadinessAndIsWatched() throws {
        let text = try String(contentsOf: Self.unit, encoding: .utf8)
        for line in ["Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "DevicePolicy=closed", "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"] {
            #expect(text.split(separator: "\n").contains { $0.hasPrefix(line) }, "missing \(line)")
        }
    }
}

/// deploy/server/guidance-server.service, checked by systemd's own analyzer.
@Suite struct ServerUnitTests {
    @Test func theServerUnitVerifiesCleanWithExposureAtMostTwo() async throws {
        let unit = RecordCommandTests.repo.appendingPathComponent("deploy/server/guidance-server.service")
        let text = try String(contentsOf: unit, encoding: .utf8)
        #expect(text.contains("ExecStart=/usr/local/bin/guidance-server serve --config /etc/guidance-server/server.yaml"))
        #expect(text.contains("RestartPreventExitStatus=78") && text.contains("User=guidance-server"))
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let copy = folder.appendingPathComponent("guidance-server.service")
        let built = Spawned.buildFolder.appendingPathComponent("guidance-server").path
        try text.replacingOccurrences(of: "/usr/local/bin/guidance-server", with: built).write(to: copy, atomically: true, encoding: .utf8)
        let verify = try await Command.executeAsync("systemd-analyze", ["verify", copy.path])
        #expect(verify.status == 0 && verify.stderr.isEmpty, "\(verify.stderr)")
        let security = try await Command.executeAsync("systemd-analyze", ["security", "--offline=true", "--no-pager", copy.path])
        let line = try #require(security.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(security.stdout)")
        let figure = try #require(line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) }, "\(line)")
        #expect(figure <= 2.0, "\(line)")
    }
}

/// deploy/build-deb.sh, packaging the binary just built; dpkg-deb reads the result.
@Suite struct DebianPackageTests {
    @Test func thePackageHoldsTheAgentTheUnitTheConfigAsConffileAndTheMaintainerScripts() async throws {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("deb-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }
        let built = try await Command.executeAsync("/usr/bin/env", [
            "AGENT_BIN=\(RecordCommandTests.agent)", "DEB_OUT=\(out.path)", "DEB_COMPRESSION=none", "bash",
            RecordCommandTests.repo.appendingPathComponent("deploy/build-deb.sh").path,
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
        for (mode, path) in [("-rwxr-xr-x", "./usr/bin/dashcam-agent"), ("-rw-r--r--", unit),
                             ("-rw-r--r--", "./etc/dashcam-agent/agent.yaml"), ("-rw-r--r--", rules),
                             ("-rw-r--r--", "./usr/share/dashcam-agent/boards/raspberry-pi-4.yaml"),
                             ("-rw-r--r--", "./usr/share/dashcam-agent/boards/raspberry-pi-4-usb-webcam.yaml"),
                             ("-rw-r--r--", "./usr/share/dashcam-agent/default.yaml"),
                             ("-rw-r--r--", "./usr/share/doc/dashcam-agent/copyright"),
                             ("-rw-r--r--", "./usr/share/doc/dashcam-agent/changelog.gz"),
                             ("-rw-r--r--", "./usr/share/doc/dashcam-agent/README.Debian"),
                             ("-rw-r--r--", "./usr/share/lintian/overrides/dashcam-agent")] {
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
        for library in ["libgpiod.so.*", "libavcodec.so.*", "libespeak-ng.so.*", "libc.so.6"] {
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
        #expect(postinst.contains("adduser --system") && postinst.contains("install -m 0600") && postinst.contains("deb-systemd-helper enable"))
    }
}
