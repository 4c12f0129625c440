import Foundation
import Glibc
import HAL
import Synchronization
import TestSupport
import UTC

/// Debian's gpsd, run by a test on loopback: it reads NMEA sentences the test sends it over UDP
/// (`udp://127.0.0.1:FEED`, as a receiver on a serial line would give them) and serves its JSON
/// on `port`, as on a car's board.
final class Gpsd: @unchecked Sendable {
    static let binary = "/usr/sbin/gpsd"
    static var available: Bool { FileManager.default.isExecutableFile(atPath: binary) }

    let port: Int
    let feedPort: Int
    let folder: URL
    private(set) var process: Spawned?
    /// What the receiver sees; ``feed()`` sends it each second, and a test may change it meanwhile.
    let sky = Mutex(Sky())

    init(folder: URL, port: Int? = nil, feedPort: Int? = nil) throws {
        self.folder = folder
        self.port = try port ?? PostgresServer.freePort()
        self.feedPort = try feedPort ?? PostgresServer.freePort()
    }

    /// Starts it (again, on the same ports).
    func start() throws {
        process = try Spawned(
            Self.binary,
            [
                "-N", "-n", "-S", String(port), "-F", folder.appendingPathComponent("gpsd-\(port).sock").path,
                "udp://127.0.0.1:\(feedPort)"
            ], folder: folder, absolute: true)
    }

    /// SIGKILL: gpsd gone, as when its receiver's board crashes.
    func kill() {
        if let process, process.process.isRunning { _ = process.stop(SIGKILL) }
        process = nil
    }

    deinit { kill() }

    /// What the receiver says each second.
    struct Sky: Sendable {
        var fix = true
        var lat = 37.5665
        var lon = 126.978
        var knots = 27.0
        var course = 91.5
        var altitude = 35.0
    }

    /// RMC, GGA and GSA for `now`, each with its checksum.
    static func sentences(_ sky: Sky, now: Date) -> [String] {
        let utc = UTCTime(now)
        let time = String(format: "%02ld%02ld%02ld.00", utc.hour, utc.minute, utc.second)
        let date = String(format: "%02ld%02ld%02ld", utc.day, utc.month, utc.year % 100)
        func angle(_ value: Double, degreesDigits: Int) -> String {
            let degrees = Int(abs(value))
            let minutes = (abs(value) - Double(degrees)) * 60
            return String(format: "%0\(degreesDigits)ld%07.4f", degrees, minutes)
        }
        let lat = angle(sky.lat, degreesDigits: 2) + (sky.lat >= 0 ? ",N" : ",S")
        let lon = angle(sky.lon, degreesDigits: 3) + (sky.lon >= 0 ? ",E" : ",W")
        let bodies =
            sky.fix
            ? [
                "GPRMC,\(time),A,\(lat),\(lon),\(String(format: "%.1f", sky.knots)),\(String(format: "%.1f", sky.course)),\(date),,,A",
                "GPGGA,\(time),\(lat),\(lon),1,08,0.9,\(String(format: "%.1f", sky.altitude)),M,18.0,M,,",
                "GPGSA,A,3,01,02,03,04,05,06,07,08,,,,,1.5,0.9,1.2"
            ]
            : ["GPRMC,\(time),V,,,,,,,\(date),,,N", "GPGGA,\(time),,,,,0,00,99.9,,M,,M,,", "GPGSA,A,1,,,,,,,,,,,,,99.9,99.9,99.9"]
        return bodies.map { body in
            let checksum = body.utf8.reduce(UInt8(0)) { $0 ^ $1 }
            return "$\(body)*\(String(format: "%02X", Int(checksum)))\r\n"
        }
    }

    /// Sends ``sky`` once a second until the task is cancelled.
    func feed() async {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(feedPort).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        while !Task.isCancelled {
            for sentence in Self.sentences(sky.withLock { $0 }, now: Date()) {
                _ = sentence.withCString { text in
                    withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(fd, text, strlen(text), 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}
