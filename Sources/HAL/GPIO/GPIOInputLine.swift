internal import CGPIOD
internal import Glibc
import Synchronization

/// A GPIO input line requested through libgpiod (1.x or 2.x) with edge events on both edges.
///
/// The line is requested "as is": no bias is set, so the board's pull (or a test's) stays as it
/// is. Debouncing is the caller's (it is a rule about time: ``isActive()`` reads the level now).
public final class GPIOInputLine: InputLine {
    /// The resolved chip and line, e.g. `gpiochip1 [gpio-sim.0-node0] line 2 "ignition"`.
    public let description: String
    private let input: Mutex<OpaquePointer?>

    /// Requests the line as an input.
    ///
    /// - Parameters:
    ///   - chip: A path, a name, a number or a label, as for ``GPIOLine``; `nil` or empty: every
    ///     chip is searched for a line given by name.
    ///   - line: The offset on the chip, or the line's name.
    ///   - activeLow: The input is active (ignition on) when the line is low.
    /// - Throws: ``GPIOError`` naming the chip and the line.
    public init(
        chip: String?, line: GPIOLine.Selector, activeLow: Bool = false,
        consumer: String = GPIOLine.defaultConsumer
    ) throws(GPIOError) {
        let (found, offset, resolved) = try GPIOLine.locate(chip: chip, line: line)
        let requested: OpaquePointer
        do {
            requested = try found.requestInput(offset: offset, activeLow: activeLow, consumer: consumer)
        } catch {
            throw GPIOLine.requestError(error.code, line: resolved, chip: found, offset: offset, as: "input")
        }
        description = "\(found) \(resolved)" + (activeLow ? " active-low" : "")
        input = Mutex(requested)
    }

    deinit { release() }

    public func isActive() throws -> Bool {
        try input.withLock { input throws(GPIOError) in
            guard let input else { throw .released(description) }
            let value = cgpiod_input_get(input)
            guard value >= 0 else {
                let code = errno
                throw .set("GPIO chip \(description): cannot read the line (\(GPIOLine.text(code)))", code: code)
            }
            return value == 1
        }
    }

    public func waitForChange(timeoutNs: Int64) throws -> Bool {
        // The wait holds no lock: a release from another thread waits for nothing. The request
        // stays valid while waiting because only release() frees it, and the owner calls that
        // from the waiting thread or after it ended.
        guard let handle = input.withLock({ $0 }) else { throw GPIOError.released(description) }
        let ready = cgpiod_input_wait(handle, max(0, timeoutNs))
        guard ready >= 0 else {
            let code = errno
            if code == EINTR { return false }
            throw GPIOError.set("GPIO chip \(description): cannot wait for an edge (\(GPIOLine.text(code)))", code: code)
        }
        return ready == 1
    }

    public func release() {
        input.withLock { input in
            guard let held = input else { return }
            cgpiod_input_release(held)
            input = nil
        }
    }
}
