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
        guard let active = try read() else { throw .invalidRequest("GPIO value file \(path): holds \"\", not 0 or 1") }
        return active
    }

    /// True once the level read differs from the first one. A program that rewrites the file
    /// empties it before it writes the new level: an empty file is no reading, not an error, and
    /// after one the first level read counts as a change.
    public func waitForChange(timeoutNs: Int64) throws -> Bool {
        let before = try read()
        let deadline = MonotonicClock.now() + UInt64(max(0, timeoutNs))
        while MonotonicClock.now() < deadline {
            MonotonicClock.sleep(until: min(deadline, MonotonicClock.now() + UInt64(interval)))
            if let now = try read(), now != before { return true }
        }
        return false
    }

    /// The level, or nil when the file is empty.
    private func read() throws(GPIOError) -> Bool? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw .lineNotFound("GPIO value file \(path): cannot be read", code: nil)
        }
        switch text.trimmingCharacters(in: .whitespacesAndNewlines) {
        case "1": return !activeLow
        case "0": return activeLow
        case "": return nil
        case let other: throw .invalidRequest("GPIO value file \(path): holds \"\(other.prefix(16))\", not 0 or 1")
        }
    }

    public func release() {}
}
