import Foundation

/// An input read from a GPIO `value` file (`0` or `1`): the kernel's older sysfs GPIO
/// interface some boards still set up in their device tree or boot scripts, or a level another
/// program keeps. Read every ``interval``: such a file tells no edges without setup.
public final class ValueFileInputLine: InputLine {
    public let path: String
    public let activeLow: Bool
    /// How often ``waitForChange(timeoutNs:)`` reads the file.
    public let interval: Int64
    public var description: String { "GPIO value file \(path)" + (activeLow ? " active-low" : "") }

    public init(path: String, activeLow: Bool = false, intervalNs: Int64 = 200_000_000) throws(GPIOError) {
        self.path = path
        self.activeLow = activeLow
        self.interval = intervalNs
        _ = try isActive()
    }

    public func isActive() throws(GPIOError) -> Bool {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw .lineNotFound("GPIO value file \(path): cannot be read", code: nil)
        }
        switch text.trimmingCharacters(in: .whitespacesAndNewlines) {
        case "1": return !activeLow
        case "0": return activeLow
        case let other: throw .invalidRequest("GPIO value file \(path): holds \"\(other.prefix(16))\", not 0 or 1")
        }
    }

    public func waitForChange(timeoutNs: Int64) throws -> Bool {
        let before = try isActive()
        let deadline = MonotonicClock.now() + UInt64(max(0, timeoutNs))
        while MonotonicClock.now() < deadline {
            MonotonicClock.sleep(until: min(deadline, MonotonicClock.now() + UInt64(interval)))
            if try isActive() != before { return true }
        }
        return false
    }

    public func release() {}
}
