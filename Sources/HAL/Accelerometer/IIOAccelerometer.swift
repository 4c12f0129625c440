import Foundation
internal import Glibc

/// A Linux IIO accelerometer read through sysfs: `in_accel_{x,y,z}_raw`, scaled by
/// `in_accel_scale` (or a scale per axis) after `in_accel_offset` if the driver has one, the
/// files every accelerometer driver exposes alike (`st_accel` for LIS3DH/LIS2DH12,
/// `bmc150-accel`, `bma400`, `bmi160`, `st_lsm6dsx`, `mpu6050`, `hid-sensor-accel-3d`).
///
/// Where the driver has a trigger (the chip's data-ready interrupt wired, as `st_accel` names
/// `lis3dh-trigger`), the samples are read from the buffered character device `/dev/iio:deviceN`:
/// the three axes (and the kernel's monotonic timestamp) enabled in `scan_elements/`, the trigger
/// set, the buffer enabled, and every record the chip took handed over (``readings()``), laid out
/// as ``IIOScanLayout`` says. The chip then runs at the slowest offered rate not below the one
/// asked for. Without a trigger, or if any step is refused, the buffer is left disabled and the
/// axes are polled through sysfs:
///
/// each read asks the driver for a fresh sample of each axis. Some drivers (`st_accel`) wake the
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
    private let buffer: Buffer?
    /// The trigger the buffer runs on; nil when the axes are polled.
    public var trigger: String? { buffer?.trigger }
    public var mode: String { buffer.map { "buffered (trigger \($0.trigger))" } ?? "polled" }

    /// The buffered character device, once enabled.
    private final class Buffer: @unchecked Sendable {
        let fd: Int32
        let path: String
        let trigger: String
        let layout: IIOScanLayout
        let enablePath: String
        /// The records carry the kernel's `CLOCK_MONOTONIC` time.
        let monotonicStamps: Bool
        /// Nanoseconds between the chip's samples.
        let periodNs: UInt64
        var bytes: [UInt8]
        var lastSample: UInt64

        init(fd: Int32, path: String, trigger: String, layout: IIOScanLayout, enablePath: String, monotonicStamps: Bool, periodNs: UInt64) {
            self.fd = fd
            self.path = path
            self.trigger = trigger
            self.layout = layout
            self.enablePath = enablePath
            self.monotonicStamps = monotonicStamps
            self.periodNs = periodNs
            bytes = [UInt8](repeating: 0, count: layout.recordBytes * IIOAccelerometer.recordsPerRead)
            lastSample = MonotonicClock.now()
        }

        deinit {
            _ = IIOAccelerometer.write(enablePath, "0")
            close(fd)
        }
    }

    /// Records taken from the buffer in one read.
    static let recordsPerRead = 64
    /// A buffer that gives nothing for this long (and ten sample periods) has stopped.
    static let silentNs: UInt64 = 2_000_000_000

    private struct Axis: @unchecked Sendable {
        let fd: Int32
        let path: String
        /// m/s² per count.
        let scale: Double
        let offset: Double
    }

    /// `device` is a device name (the driver's `name` file, e.g. `lis3dh`), `iio:deviceN`, its
    /// sysfs folder or its `/dev/iio:deviceN` node; `root` is where the IIO devices are listed.
    /// `buffered: false` polls sysfs even where a trigger exists; `devices` is where the
    /// character devices are (`/dev`).
    public init(
        device: String, hz: Int, root: String = IIOAccelerometer.devicesFolder, buffered: Bool = true,
        devices: String = "/dev"
    ) throws(AccelerometerError) {
        let folder = try Self.find(device, root: root)
        self.folder = folder
        let node = folder.split(separator: "/").last.map(String.init) ?? folder
        let driver = Self.text(folder + "/name") ?? "?"
        name = "\(driver) (\(node))"
        let trigger = buffered ? Self.trigger(folder: folder, driver: driver, root: root) : nil
        chipHz = Self.setRate(folder: folder, hz: Double(hz), buffered: trigger != nil)
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
        let rate = chipHz ?? Double(hz)
        buffer = trigger.flatMap { trigger in
            Self.startBuffer(folder: folder, node: "\(devices)/\(node)", trigger: trigger, hz: rate)
        }
    }

    deinit {
        axes.forEach { close($0.fd) }
    }

    public func readings() throws(AccelerometerError) -> [Acceleration] {
        guard let buffer else { return [try read()] }
        let count = buffer.bytes.withUnsafeMutableBytes { Glibc.read(buffer.fd, $0.baseAddress, $0.count) }
        let now = MonotonicClock.now()
        guard count > 0 else {
            let code = count < 0 ? errno : EAGAIN
            guard code == EAGAIN || code == EINTR else {
                throw AccelerometerError("\(name): cannot read \(buffer.path): \(String(cString: strerror(code)))")
            }
            if now - min(now, buffer.lastSample) > max(Self.silentNs, 10 * buffer.periodNs) {
                throw AccelerometerError(
                    "\(name): no samples from \(buffer.path) (trigger \(buffer.trigger)) for \((now - buffer.lastSample) / 1_000_000) ms")
            }
            return []
        }
        let records = count / buffer.layout.recordBytes
        var out: [Acceleration] = []
        out.reserveCapacity(records)
        for record in 0..<records {
            let start = record * buffer.layout.recordBytes
            var g = [0.0, 0.0, 0.0]
            for (i, axis) in ["x", "y", "z"].enumerated() {
                guard let raw = buffer.layout.value(axis, in: buffer.bytes, record: start) else { continue }
                g[i] = (Double(raw) + axes[i].offset) * axes[i].scale / Acceleration.standardGravity
            }
            // The kernel's time of the sample if it is on the monotonic clock and not ahead of
            // now; else spread back from now by the chip's period.
            let spread = now - min(now, UInt64(records - 1 - record) * buffer.periodNs)
            let stamp = buffer.monotonicStamps ? buffer.layout.value("timestamp", in: buffer.bytes, record: start) : nil
            let at = stamp.flatMap { $0 > 0 && UInt64($0) <= now ? UInt64($0) : nil } ?? spread
            out.append(Acceleration(x: g[0], y: g[1], z: g[2], at: at))
        }
        if records > 0 { buffer.lastSample = now }
        return out
    }

    // MARK: - The buffer

    /// The trigger to run the buffer on: the one set already, else the driver's own (a trigger
    /// device whose name starts with the driver's, e.g. `lis3dh-trigger`); nil without one.
    static func trigger(folder: String, driver: String, root: String) -> String? {
        guard access(folder + "/trigger/current_trigger", F_OK) == 0, isDirectory(folder + "/scan_elements") else { return nil }
        if let current = text(folder + "/trigger/current_trigger"), !current.isEmpty { return current }
        let own = entries(of: root).filter { $0.hasPrefix("trigger") }.sorted()
            .compactMap { text("\(root)/\($0)/name") }.filter { $0.hasPrefix(driver) }
        return own.first
    }

    /// Enables x, y, z (and the timestamp, on the monotonic clock) on `trigger` and opens the
    /// device; nil, with the buffer left disabled, if any step is refused.
    private static func startBuffer(folder: String, node: String, trigger: String, hz: Double) -> Buffer? {
        let scan = folder + "/scan_elements"
        let enables: [String] = [folder + "/buffer0/enable", folder + "/buffer/enable"]
        let lengths: [String] = [folder + "/buffer0/length", folder + "/buffer/length"]
        let enablePath = enables.first { access($0, F_OK) == 0 }
        let lengthPath = lengths.first { access($0, F_OK) == 0 }
        guard let enablePath, let lengthPath else { return nil }
        _ = write(enablePath, "0")
        var started = false
        defer { if !started { _ = write(enablePath, "0") } }
        guard text(folder + "/trigger/current_trigger") == trigger || write(folder + "/trigger/current_trigger", trigger) else {
            return nil
        }
        var enabled: [(name: String, index: Int, type: IIOScanType)] = []
        for axis in ["x", "y", "z"] {
            let base = "\(scan)/in_accel_\(axis)"
            guard write(base + "_en", "1"), let index = text(base + "_index").flatMap({ Int($0) }),
                let type = text(base + "_type").flatMap(IIOScanType.init)
            else { return nil }
            enabled.append((axis, index, type))
        }
        // Channels someone else left enabled would change the record: off.
        let ours = Set(["in_accel_x_en", "in_accel_y_en", "in_accel_z_en", "in_timestamp_en"])
        for entry in entries(of: scan) where entry.hasSuffix("_en") && !ours.contains(entry) { _ = write("\(scan)/\(entry)", "0") }
        var monotonic = false
        if access(scan + "/in_timestamp_en", F_OK) == 0 {
            monotonic = write(folder + "/current_timestamp_clock", "monotonic") && text(folder + "/current_timestamp_clock") == "monotonic"
            if monotonic, write(scan + "/in_timestamp_en", "1"), let index = text(scan + "/in_timestamp_index").flatMap({ Int($0) }),
                let type = text(scan + "/in_timestamp_type").flatMap(IIOScanType.init)
            {
                enabled.append(("timestamp", index, type))
            } else {
                monotonic = false
                _ = write(scan + "/in_timestamp_en", "0")
            }
        }
        guard let layout = IIOScanLayout(enabled) else { return nil }
        _ = write(lengthPath, "128")
        guard write(enablePath, "1") else { return nil }
        let fd = open(node, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        started = true
        let period = UInt64(1_000_000_000 / max(1, hz))
        return Buffer(
            fd: fd, path: node, trigger: trigger, layout: layout, enablePath: enablePath, monotonicStamps: monotonic, periodNs: period)
    }

    public func read() throws(AccelerometerError) -> Acceleration {
        var g = [0.0, 0.0, 0.0]
        for (i, axis) in axes.enumerated() {
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = buffer.withUnsafeMutableBytes { pread(axis.fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else {
                let code = count < 0 ? errno : 0
                throw AccelerometerError(
                    "\(name): cannot read \(axis.path): \(code == 0 ? "nothing to read" : String(cString: strerror(code)))")
            }
            let text = String(decoding: buffer[..<count], as: UTF8.self)
            guard let raw = Int64(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw AccelerometerError(
                    "\(name): \(axis.path) reads '\(text.trimmingCharacters(in: .whitespacesAndNewlines))', not a whole number")
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
            throw AccelerometerError(
                "sensors.accel.device \(device): no IIO device of that name in \(root)"
                    + (present.isEmpty ? " (none at all)" : "; there are \(present.joined(separator: ", "))"))
        }
        // Several of one name (a board with two of a chip): the lowest number, as listed.
        return "\(root)/\(first)"
    }

    private static func deviceNumber(_ entry: String) -> Int { Int(entry.dropFirst("iio:device".count)) ?? Int.max }

    /// Sets the chip's rate (see the type's note); the rate set, or nil.
    static func setRate(folder: String, hz: Double, buffered: Bool = false) -> Double? {
        let names = ["in_accel_sampling_frequency", "sampling_frequency"]
        let paths: [String] = names.map { "\(folder)/\($0)" }
        guard let file = paths.first(where: { path in access(path, F_OK) == 0 }) else { return nil }
        let offered = names.compactMap { text("\(folder)/\($0)_available") }.first.map(rates) ?? []
        let wanted = hz * rateFactor
        // Buffered, every sample is read: the slowest rate that is not below the one asked for.
        let chosen = buffered ? (offered.filter { $0 >= hz }.min() ?? offered.max()) : offered.max()
        guard let rate = chosen else {
            // No list: ask for the rate itself, and keep what the driver made of it.
            _ = write(file, format(buffered ? hz : wanted))
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

    static func write(_ path: String, _ value: String) -> Bool {
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
