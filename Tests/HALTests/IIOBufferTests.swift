import Foundation
@testable import HAL
import Testing

/// IIO's scan element types and record layouts, as the kernel's ABI documents them
/// (Documentation/ABI/testing/sysfs-bus-iio: `scan_elements/*_type`, `*_index`), and the buffered
/// reading of an accelerometer laid out as `st_accel` lays out a LIS3DH with a trigger. A real
/// driver with a trigger needs the chip's interrupt, which `i2c-stub` has not: in the VM suite the
/// same driver is polled (case 60), and this path is tested here on files.
@Suite struct IIOScanTests {
    @Test func typesAsDriversWriteThem() throws {
        let lis3dh = try #require(IIOScanType("le:s12/16>>4"))
        #expect(!lis3dh.bigEndian && lis3dh.signed && lis3dh.realBits == 12 && lis3dh.storageBits == 16 && lis3dh.shift == 4)
        #expect(lis3dh.storageBytes == 2 && lis3dh.description == "le:s12/16>>4")
        let timestamp = try #require(IIOScanType("le:s64/64>>0\n"))
        #expect(timestamp.storageBytes == 8)
        let repeated = try #require(IIOScanType("be:u16/16X3>>0"))
        #expect(repeated.repeatCount == 3 && repeated.storageBytes == 6 && repeated.description == "be:u16/16X3>>0")
        for bad in [
            "", "le", "xe:s12/16>>4", "le:x12/16>>4", "le:s12/12>>0", "le:s17/16>>0", "le:s12/16>>8", "le:s0/16>>0",
            "le:s12/16>4", "le:s12/16>>", "le:s12/16X0>>0", "le:s12/16X9>>0", "le:s12/16>>4>>4", "le:s-12/16>>4",
            "le:s12/16>>4 extra", "le:s１２/16>>4", String(repeating: "9", count: 40)
        ] {
            #expect(IIOScanType(bad) == nil, "\(bad)")
        }
    }

    @Test func valuesAreShiftedMaskedAndSignExtended() throws {
        let lis3dh = try #require(IIOScanType("le:s12/16>>4"))
        // -500 counts, left-justified in 16 bits, little-endian.
        let raw = UInt16(bitPattern: Int16(-500 << 4))
        #expect(lis3dh.value(in: [UInt8(raw & 0xff), UInt8(raw >> 8)], at: 0) == -500)
        #expect(lis3dh.value(in: [0xf0, 0x7f], at: 0) == 2047)
        #expect(lis3dh.value(in: [0x00, 0x80], at: 0) == -2048)
        let be = try #require(IIOScanType("be:s16/16>>0"))
        #expect(be.value(in: [0xff, 0xfe], at: 0) == -2)
        let unsigned = try #require(IIOScanType("le:u10/16>>0"))
        #expect(unsigned.value(in: [0xff, 0xff], at: 0) == 1023)
        let wide = try #require(IIOScanType("le:s64/64>>0"))
        #expect(wide.value(in: [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], at: 0) == -1)
        // Out of the bytes: nil, never a read past the end.
        #expect(lis3dh.value(in: [0x00], at: 0) == nil && lis3dh.value(in: [0, 0], at: 1) == nil && lis3dh.value(in: [0, 0], at: -1) == nil)
    }

    @Test func channelsAreAlignedToTheirSizeAndTheRecordToTheLargest() throws {
        let s16 = try #require(IIOScanType("le:s12/16>>4"))
        let s64 = try #require(IIOScanType("le:s64/64>>0"))
        // x, y, z of 2 bytes at 0, 2, 4; the timestamp at 8; 16 bytes a record.
        let layout = try #require(IIOScanLayout([("timestamp", 3, s64), ("z", 2, s16), ("x", 0, s16), ("y", 1, s16)]))
        #expect(layout.channels.map(\.name) == ["x", "y", "z", "timestamp"])
        #expect(layout.channels.map(\.offset) == [0, 2, 4, 8] && layout.recordBytes == 16)
        let bytes = try #require(IIOScanLayout([("x", 0, s16)]))
        #expect(bytes.recordBytes == 2)
        #expect(IIOScanLayout([]) == nil)
        #expect(IIOScanLayout([("x", 0, s16), ("y", 0, s16)]) == nil)
        #expect(IIOScanLayout([("x", -1, s16)]) == nil)
        let huge = try #require(IIOScanType("le:s64/64X8>>0"))
        #expect(IIOScanLayout((0..<17).map { ("c\($0)", $0, huge) }) == nil)
    }
}

@Suite struct IIOBufferedAccelerometerTests {
    /// A LIS3DH with its trigger, as st_accel shows it when the chip's interrupt is wired.
    static func buffered(in devices: IIOAccelerometerTests.Devices, current: String = "") throws -> URL {
        var files = IIOAccelerometerTests.lis3dh
        files["trigger/current_trigger"] = current
        files["buffer/enable"] = "0"
        files["buffer/length"] = "2"
        files["current_timestamp_clock"] = "realtime"
        for (i, axis) in ["x", "y", "z"].enumerated() {
            files["scan_elements/in_accel_\(axis)_en"] = "0"
            files["scan_elements/in_accel_\(axis)_index"] = "\(i)"
            files["scan_elements/in_accel_\(axis)_type"] = "le:s12/16>>4"
        }
        files["scan_elements/in_timestamp_en"] = "0"
        files["scan_elements/in_timestamp_index"] = "3"
        files["scan_elements/in_timestamp_type"] = "le:s64/64>>0"
        for (path, _) in files where path.contains("/") {
            let folder = devices.root.appendingPathComponent("iio:device0").appendingPathComponent(path).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        try FileManager.default.createDirectory(at: devices.root.appendingPathComponent("trigger0"), withIntermediateDirectories: true)
        try Data("lis3dh-trigger\n".utf8).write(to: devices.root.appendingPathComponent("trigger0/name"))
        return try devices.add("iio:device0", files: files)
    }

    static func record(x: Int, y: Int, z: Int, at: Int64) -> [UInt8] {
        var bytes: [UInt8] = []
        for count in [x, y, z] {
            let raw = UInt16(bitPattern: Int16(count << 4))
            bytes += [UInt8(raw & 0xff), UInt8(raw >> 8)]
        }
        bytes += [0, 0]
        withUnsafeBytes(of: at.littleEndian) { bytes += $0 }
        return bytes
    }

    static func read(_ url: URL) -> String {
        (try? String(contentsOf: url, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }

    @Test func withItsOwnTriggerEverySampleComesFromTheBufferInG() throws {
        let devices = try IIOAccelerometerTests.Devices()
        defer { devices.remove() }
        let folder = try Self.buffered(in: devices)
        let dev = devices.root.appendingPathComponent("dev")
        try FileManager.default.createDirectory(at: dev, withIntermediateDirectories: true)
        let now = Int64(MonotonicClock.now())
        let records = Self.record(x: 0, y: -500, z: 1000, at: now - 80_000_000) + Self.record(x: 2000, y: 0, z: 1000, at: now - 40_000_000)
        try Data(records).write(to: dev.appendingPathComponent("iio:device0"))
        var sensor: IIOAccelerometer? = try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path, devices: dev.path)
        #expect(sensor?.trigger == "lis3dh-trigger" && sensor?.mode == "buffered (trigger lis3dh-trigger)")
        // Set up as the ABI says: the trigger, the axes and the timestamp on the monotonic clock, the buffer on.
        #expect(Self.read(folder.appendingPathComponent("trigger/current_trigger")) == "lis3dh-trigger")
        for name in ["in_accel_x_en", "in_accel_y_en", "in_accel_z_en", "in_timestamp_en"] {
            #expect(Self.read(folder.appendingPathComponent("scan_elements/\(name)")) == "1", "\(name)")
        }
        #expect(Self.read(folder.appendingPathComponent("current_timestamp_clock")) == "monotonic")
        #expect(Self.read(folder.appendingPathComponent("buffer/enable")) == "1")
        // Every sample is read, so the chip runs at the slowest rate not below the one asked.
        #expect(sensor?.chipHz == 25)
        let readings = try #require(try sensor?.readings())
        #expect(readings.count == 2)
        #expect(abs(readings[0].y + 0.5) < 1e-3 && abs(readings[0].z - 1) < 1e-3 && abs(readings[1].x - 2) < 2e-3, "\(readings)")
        #expect(readings.map(\.at) == [UInt64(now - 80_000_000), UInt64(now - 40_000_000)])
        // Nothing more now: none, and no error before the buffer has been silent for long.
        #expect(try sensor?.readings().isEmpty == true)
        // Closed: the buffer is disabled again.
        sensor = nil
        #expect(Self.read(folder.appendingPathComponent("buffer/enable")) == "0")
    }

    @Test func withoutATriggerOrWhenAskedTheAxesArePolled() throws {
        let devices = try IIOAccelerometerTests.Devices()
        defer { devices.remove() }
        let folder = try Self.buffered(in: devices)
        try FileManager.default.removeItem(at: devices.root.appendingPathComponent("trigger0"))
        let dev = devices.root.appendingPathComponent("dev").path
        let untriggered = try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path, devices: dev)
        #expect(untriggered.trigger == nil && untriggered.mode == "polled" && untriggered.chipHz == 1600)
        #expect(Self.read(folder.appendingPathComponent("buffer/enable")) == "0")
        #expect(try untriggered.readings().count == 1)
        // A trigger, but polling asked for.
        let polled = try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path, buffered: false, devices: dev)
        #expect(polled.trigger == nil)
    }

    @Test func aBufferThatCannotBeOpenedIsLeftDisabledAndTheAxesPolled() throws {
        let devices = try IIOAccelerometerTests.Devices()
        defer { devices.remove() }
        let folder = try Self.buffered(in: devices, current: "lis3dh-trigger")
        // No character device where it should be.
        let sensor = try IIOAccelerometer(
            device: "lis3dh", hz: 25, root: devices.root.path, devices: devices.root.appendingPathComponent("nodev").path)
        #expect(sensor.trigger == nil && sensor.mode == "polled")
        #expect(Self.read(folder.appendingPathComponent("buffer/enable")) == "0")
        // A channel type the layout cannot hold: polled too.
        try Data("le:s12/16>>13\n".utf8).write(to: folder.appendingPathComponent("scan_elements/in_accel_y_type"))
        let dev = devices.root.appendingPathComponent("dev")
        try FileManager.default.createDirectory(at: dev, withIntermediateDirectories: true)
        try Data().write(to: dev.appendingPathComponent("iio:device0"))
        #expect(try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path, devices: dev.path).trigger == nil)
    }
}
