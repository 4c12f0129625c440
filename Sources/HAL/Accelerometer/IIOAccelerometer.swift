import Foundation
internal import Glibc

/// A Linux IIO accelerometer read through sysfs: `in_accel_{x,y,z}_raw`, scaled by
/// `in_accel_scale` (or a scale per axis) after `in_accel_offset` if the driver has one, the
/// files every accelerometer driver exposes alike (`st_accel` for LIS3DH/LIS2DH12,
/// `bmc150-accel`, `bma400`, `bmi160`, `st_lsm6dsx`, `mpu6050`, `hid-sensor-accel-3d`).
///
/// Each read asks the driver for a fresh sample of each axis. Some drivers (`st_accel`) wake the
/// chip and sleep for two of its sample periods on every read, so the chip is set to the fastest
/// rate it offers (`sampling_frequency_available`); a driver with no list is asked for
/// ``rateFactor`` times the rate it is read at.
public final class IIOAccelerometer: Accelerometer {
    public static let devicesFolder = "/sys/bus/iio/devices"
    /// How much faster than it is read a chip with no list of rates is asked to sample.
    public static let rateFactor = 8.0

    public let name: String
    /// The device's sysfs folder.
    public let folder: String
    /// The rate the chip was set to, Hz; nil if the driver has no rate to set or refused it.
    public let chipHz: Double?
    private let axes: [Axis]

    private struct Axis: @unchecked Sendable {
        let fd: Int32
        let path: String
        /// m/s² per count.
        let scale: Double
        let offset: Double
    }

    /// `device` is a device name (the driver's `name` file, e.g. `lis3dh`), `iio:deviceN`, its
    /// sysfs folder or its `/dev/iio:deviceN` node; `root` is where the IIO devices are listed.
    public init(device: String, hz: Int, root: String = IIOAccelerometer.devicesFolder) throws(AccelerometerError) {
        let folder = try Self.find(device, root: root)
        self.folder = folder
        let node = folder.split(separator: "/").last.map(String.init) ?? folder
        let driver = Self.text(folder + "/name") ?? "?"
        name = "\(driver) (\(node))"
        chipHz = Self.setRate(folder: folder, hz: Double(hz))
        var axes: [Axis] = []
        for axis in ["x", "y", "z"] {
            let path = "\(folder)/in_accel_\(axis)_raw"
            guard let scale = Self.number(folder + "/in_accel_\(axis)_scale") ?? Self.number(folder + "/in_accel_scale"),
                  scale.isFinite, scale > 0
            else {
                axes.forEach { close($0.fd) }
                throw AccelerometerError("\(name): no in_accel_scale or in_accel_\(axis)_scale in \(folder)")
            }
            let offset = Self.number(folder + "/in_accel_\(axis)_offset") ?? Self.number(folder + "/in_accel_offset") ?? 0
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                let code = errno
                axes.forEach { close($0.fd) }
                throw AccelerometerError("\(name): cannot open \(path): \(String(cString: strerror(code)))")
            }
            axes.append(Axis(fd: fd, path: path, scale: scale, offset: offset.isFinite ? offset : 0))
        }
        self.axes = axes
    }

    deinit {
        axes.forEach { close($0.fd) }
    }

    public func read() throws(AccelerometerError) -> Acceleration {
        var g = [0.0, 0.0, 0.0]
        for (i, axis) in axes.enumerated() {
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = buffer.withUnsafeMutableBytes { pread(axis.fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else {
                let code = count < 0 ? errno : 0
                throw AccelerometerError("\(name): cannot read \(axis.path): \(code == 0 ? "nothing to read" : String(cString: strerror(code)))")
            }
            let text = String(decoding: buffer[..<count], as: UTF8.self)
            guard let raw = Int64(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw AccelerometerError("\(name): \(axis.path) reads '\(text.trimmingCharacters(in: .whitespacesAndNewlines))', not a whole number")
            }
            g[i] = (Double(raw) + axis.offset) * axis.scale / Acceleration.standardGravity
        }
        return Acceleration(x: g[0], y: g[1], z: g[2], at: MonotonicClock.now())
    }

    // MARK: - Finding it

    /// The sysfs folder of `device`.
    static func find(_ device: String, root: String) throws(AccelerometerError) -> String {
        if device.hasPrefix("/dev/") {
            let node = String(device.dropFirst("/dev/".count))
            guard isDirectory("\(root)/\(node)") else { throw AccelerometerError("sensors.accel.device \(device): no \(root)/\(node)") }
            return "\(root)/\(node)"
        }
        if device.hasPrefix("/") {
            guard isDirectory(device) else { throw AccelerometerError("sensors.accel.device \(device): no such folder") }
            return device
        }
        let listed = entries(of: root).filter { $0.hasPrefix("iio:device") }.sorted { deviceNumber($0) < deviceNumber($1) }
        if listed.contains(device) { return "\(root)/\(device)" }
        let named = listed.filter { text("\(root)/\($0)/name") == device }
        guard let first = named.first else {
            let present = listed.map { "\($0) (\(text("\(root)/\($0)/name") ?? "?"))" }
            throw AccelerometerError("sensors.accel.device \(device): no IIO device of that name in \(root)"
                + (present.isEmpty ? " (none at all)" : "; there are \(present.joined(separator: ", "))"))
        }
        // Several of one name (a board with two of a chip): the lowest number, as listed.
        return "\(root)/\(first)"
    }

    private static func deviceNumber(_ entry: String) -> Int { Int(entry.dropFirst("iio:device".count)) ?? Int.max }

    /// Sets the chip's rate (see the type's note); the rate set, or nil.
    static func setRate(folder: String, hz: Double) -> Double? {
        let names = ["in_accel_sampling_frequency", "sampling_frequency"]
        let paths: [String] = names.map { "\(folder)/\($0)" }
        guard let file = paths.first(where: { path in access(path, F_OK) == 0 }) else { return nil }
        let offered = names.compactMap { text("\(folder)/\($0)_available") }.first.map(rates) ?? []
        let wanted = hz * rateFactor
        guard let rate = offered.max() else {
            // No list: ask for the rate itself, and keep what the driver made of it.
            _ = write(file, format(wanted))
            return number(file)
        }
        guard write(file, format(rate)) else { return number(file) }
        return number(file) ?? rate
    }

    /// `1 10 25 50` or `0.781000 1.563000 …`: IIO's lists of rates.
    static func rates(_ text: String) -> [Double] {
        text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" }).compactMap { Double($0) }.filter { $0.isFinite && $0 > 0 }
    }

    private static func format(_ rate: Double) -> String {
        rate == rate.rounded() ? String(Int(rate)) : String(rate)
    }

    // MARK: - Files

    static func text(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func number(_ path: String) -> Double? { text(path).flatMap { Double($0) } }

    private static func write(_ path: String, _ value: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let bytes = Array(value.utf8)
        return bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    private static func entries(of folder: String) -> [String] {
        guard let dir = opendir(folder) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }
}
