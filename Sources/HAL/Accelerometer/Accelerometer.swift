/// One reading of a three-axis accelerometer: the sensor's own axes, in g, gravity included (a
/// sensor at rest reads 1 g along whichever axis points up).
public struct Acceleration: Sendable, Equatable {
    public var x: Double
    public var y: Double
    public var z: Double
    /// ``MonotonicClock`` nanoseconds when it was read.
    public var at: UInt64

    public init(x: Double, y: Double, z: Double, at: UInt64) {
        self.x = x
        self.y = y
        self.z = z
        self.at = at
    }

    /// Standard gravity, m/s² per g: IIO reports acceleration in m/s².
    public static let standardGravity = 9.80665
}

/// A G-sensor: reads the acceleration now. Blocking (a bus transfer, or a wait for the chip's
/// next sample): the agent calls it from a thread of its own, at its own pace.
public protocol Accelerometer: Sendable {
    /// What the logs and `status` call it, e.g. `lis3dh (iio:device0)`.
    var name: String { get }
    /// How it is read, for the log: `polled`, or `buffered (trigger lis3dh-trigger)`.
    var mode: String { get }
    func read() throws(AccelerometerError) -> Acceleration
    /// Every reading since the last call, oldest first: a buffered device hands over each sample
    /// the chip took; one that is polled, the one it reads now.
    func readings() throws(AccelerometerError) -> [Acceleration]
}

extension Accelerometer {
    public var mode: String { "polled" }
    public func readings() throws(AccelerometerError) -> [Acceleration] { [try read()] }
}

/// Why the G-sensor cannot be found or read.
public struct AccelerometerError: Error, Equatable, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
