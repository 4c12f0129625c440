internal import CGPIOD
internal import Glibc
import Synchronization

/// A GPIO output line requested through libgpiod (1.x or 2.x, whichever the build found).
///
/// The line is requested as an output driven inactive, under a consumer name that `gpioinfo`
/// shows while it is held. ``release()``, or the last reference going away, drives it inactive
/// and gives it back; so does the process ending, as the kernel closes the request.
public final class GPIOLine: HapticLine {
    /// Which line on the chip.
    public enum Selector: Sendable, Hashable, CustomStringConvertible {
        /// The line's offset on the chip, from 0.
        case offset(Int)
        /// The line's name as the kernel has it (`gpioinfo` shows it, `gpiofind` finds it).
        case name(String)

        public var description: String {
            switch self {
            case .offset(let offset): "line \(offset)"
            case .name(let name): "line \"\(name)\""
            }
        }
    }

    /// What `gpioinfo` shows as the line's user.
    public static let defaultConsumer = "dashcam-agent"

    /// The libgpiod in use, e.g. `libgpiod 1.6.3 (v1 API)`.
    public static var libraryVersion: String {
        "libgpiod \(String(cString: cgpiod_library_version())) (v\(cgpiod_api_major()) API)"
    }

    /// The resolved chip and line, e.g. `gpiochip0 [gpio-sim.0-node0] line 5 "haptic" active-low`.
    public let description: String
    private let output: Mutex<OpaquePointer?>

    /// Requests the line as an output, driven inactive.
    ///
    /// - Parameters:
    ///   - chip: A path (`/dev/gpiochip0`), a name (`gpiochip0`), a number (`0`) or a label
    ///     (`gpio-sim.0-node0`). `nil` or empty: every chip is searched for a line given by name,
    ///     like `gpiofind`.
    ///   - line: The offset on the chip, or the line's name.
    ///   - activeLow: The motor runs when the line is low.
    /// - Throws: ``GPIOError`` naming the chip and the line: no such chip or line, not a GPIO
    ///   chip, permission denied, or the line busy (with the consumer that holds it, if the
    ///   kernel tells).
    public init(
        chip: String?, line: Selector, activeLow: Bool = false,
        consumer: String = GPIOLine.defaultConsumer
    ) throws(GPIOError) {
        let (found, offset, resolved) = try Self.locate(chip: chip, line: line)
        let requested: OpaquePointer
        do {
            requested = try found.requestOutput(offset: offset, activeLow: activeLow, consumer: consumer)
        } catch {
            throw Self.requestError(error.code, line: resolved, chip: found, offset: offset)
        }
        description = "\(found) \(resolved)" + (activeLow ? " active-low" : "")
        output = Mutex(requested)
    }

    deinit { release() }

    public func setActive(_ active: Bool) throws {
        try output.withLock { output throws(GPIOError) in
            guard let output else { throw .released(description) }
            guard cgpiod_output_set(output, active) == 0 else {
                let code = errno
                throw .set(
                    "GPIO chip \(description): cannot set the line \(active ? "active" : "inactive") (\(Self.text(code)))",
                    code: code)
            }
        }
    }

    public func release() {
        output.withLock { output in
            guard let held = output else { return }
            cgpiod_output_release(held)
            output = nil
        }
    }
}
