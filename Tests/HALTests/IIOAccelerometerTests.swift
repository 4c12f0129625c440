import Foundation
@testable import HAL
import Testing

/// The IIO accelerometer's files as drivers lay them out, in a folder of the test's: found by
/// name, number, folder or node; scaled by a shared or a per-axis scale, after an offset; the
/// chip's rate set to its fastest. The real driver is read in the VM suite (case 60).
@Suite struct IIOAccelerometerTests {
    /// `/sys/bus/iio/devices` in miniature.
    struct Devices {
        let root: URL
        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("iio-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        }

        @discardableResult
        func add(_ node: String, files: [String: String]) throws -> URL {
            let folder = root.appendingPathComponent(node)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (name, text) in files { try Data((text + "\n").utf8).write(to: folder.appendingPathComponent(name)) }
            return folder
        }

        func remove() { try? FileManager.default.removeItem(at: root) }
    }

    /// A LIS3DH as st_accel shows it: per-axis scales, `sampling_frequency` and its list.
    static let lis3dh = [
        "name": "lis3dh", "in_accel_x_raw": "0", "in_accel_y_raw": "-500", "in_accel_z_raw": "1000",
        "in_accel_x_scale": "0.009806", "in_accel_y_scale": "0.009806", "in_accel_z_scale": "0.009806",
        "sampling_frequency": "1", "sampling_frequency_available": "1 10 25 50 100 200 400 1600"
    ]

    @Test func aLIS3DHIsFoundByItsNameAndReadInG() throws {
        let devices = try Devices()
        defer { devices.remove() }
        try devices.add("iio:device0", files: ["name": "ads1015"])  // an ADC: not it
        let folder = try devices.add("iio:device1", files: Self.lis3dh)
        let sensor = try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path)
        #expect(sensor.name == "lis3dh (iio:device1)" && sensor.folder == folder.path)
        let reading = try sensor.read()
        #expect(abs(reading.x) < 1e-9 && abs(reading.y + 0.5) < 1e-3 && abs(reading.z - 1) < 1e-3, "\(reading)")
        // The chip was set to its fastest rate.
        #expect(sensor.chipHz == 1600)
        #expect(try String(contentsOf: folder.appendingPathComponent("sampling_frequency"), encoding: .utf8).hasPrefix("1600"))
        // A new value in the file is the next reading (the files stay open).
        try Data("2047\n".utf8).write(to: folder.appendingPathComponent("in_accel_x_raw"))
        #expect(abs(try sensor.read().x - 2.047) < 2e-3)
    }

    @Test func theSameDeviceByNumberFolderOrNode() throws {
        let devices = try Devices()
        defer { devices.remove() }
        let folder = try devices.add("iio:device3", files: Self.lis3dh)
        for name in ["iio:device3", folder.path] {
            #expect(try IIOAccelerometer(device: name, hz: 25, root: devices.root.path).folder == folder.path, "\(name)")
        }
        // /dev/iio:deviceN names the folder of the same name.
        #expect(try IIOAccelerometer(device: "/dev/iio:device3", hz: 25, root: devices.root.path).folder == folder.path)
        // Two of one name: the lowest number.
        try devices.add("iio:device10", files: Self.lis3dh)
        try devices.add("iio:device2", files: Self.lis3dh)
        #expect(try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path).folder.hasSuffix("iio:device2"))
    }

    @Test func aSharedScaleAnOffsetAndNoRateToSet() throws {
        let devices = try Devices()
        defer { devices.remove() }
        // hid-sensor-accel-3d style: one scale, an offset, a rate file without a list.
        try devices.add(
            "iio:device0",
            files: [
                "name": "accel_3d", "in_accel_x_raw": "100", "in_accel_y_raw": "0", "in_accel_z_raw": "0",
                "in_accel_scale": "0.0980665", "in_accel_offset": "-100", "in_accel_sampling_frequency": "10"
            ])
        let sensor = try IIOAccelerometer(device: "accel_3d", hz: 25, root: devices.root.path)
        let reading = try sensor.read()
        #expect(abs(reading.x) < 1e-9 && abs(reading.y + 1) < 1e-9 && abs(reading.z + 1) < 1e-9, "(raw + offset) × scale: \(reading)")
        #expect(sensor.chipHz == 200, "asked for 8 × 25 Hz")
        // Nothing to set at all.
        try devices.add(
            "iio:device1",
            files: ["name": "bare", "in_accel_x_raw": "0", "in_accel_y_raw": "0", "in_accel_z_raw": "0", "in_accel_scale": "1"])
        #expect(try IIOAccelerometer(device: "bare", hz: 25, root: devices.root.path).chipHz == nil)
    }

    @Test func whatIsWrongIsSaid() throws {
        let devices = try Devices()
        defer { devices.remove() }
        try devices.add("iio:device0", files: ["name": "ads1015"])
        #expect(
            throws: AccelerometerError(
                "sensors.accel.device lis3dh: no IIO device of that name in \(devices.root.path); there are iio:device0 (ads1015)")
        ) {
            try IIOAccelerometer(device: "lis3dh", hz: 25, root: devices.root.path)
        }
        #expect(
            throws: AccelerometerError("ads1015 (iio:device0): no in_accel_scale or in_accel_x_scale in \(devices.root.path)/iio:device0")
        ) {
            _ = try IIOAccelerometer(device: "ads1015", hz: 25, root: devices.root.path)
        }
        var broken = Self.lis3dh
        broken["in_accel_z_raw"] = "lots"
        try devices.add("iio:device1", files: broken.merging(["name": "broken"]) { $1 })
        let sensor = try IIOAccelerometer(device: "broken", hz: 25, root: devices.root.path)
        #expect(
            throws: AccelerometerError(
                "broken (iio:device1): \(devices.root.path)/iio:device1/in_accel_z_raw reads 'lots', not a whole number")
        ) {
            try sensor.read()
        }
        #expect(throws: AccelerometerError.self) { try IIOAccelerometer(device: "/dev/iio:device9", hz: 25, root: devices.root.path) }
    }
}
