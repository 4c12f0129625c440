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
    private let output: Mutex<UnsafeMutablePointer<cgpiod_output>?>

    /// Requests the line as an output, driven inactive.
    ///
    /// - Parameters:
    ///   - chip: A path (`/dev/gpiochip0`), a name (`gpiochip0`), a number (`0`) or a label
    ///     (`gpio-sim.0-node0`). `nil` or empty: every chip is searched for a line given by name.
    ///   - line: The offset on the chip, or the line's name.
    ///   - activeLow: The motor runs when the line is low.
    /// - Throws: ``HapticsError`` naming the chip and the line: no such chip or line, permission
    ///   denied, or the line busy (with the consumer that holds it, if the kernel tells).
    public init(chip: String?, line: Selector, activeLow: Bool = false,
                consumer: String = GPIOLine.defaultConsumer) throws(HapticsError) {
        let offset: Int32, name: String
        switch line {
        case .offset(let value):
            offset = value < 0 ? -1 : Int32(clamping: value)
            name = ""
        case .name(let value):
            offset = -1
            name = value
        }
        var message = [CChar](repeating: 0, count: 512)
        let (opened, code) = message.withUnsafeMutableBufferPointer { buffer in
            let opened = cgpiod_output_open(chip ?? "", offset, name, activeLow, consumer, buffer.baseAddress, buffer.count)
            return (opened, errno)
        }
        guard let opened else {
            var text = Self.text(message)
            if text.isEmpty { text = "GPIO chip \"\(chip ?? "")\" \(line): \(String(cString: strerror(code)))" }
            throw .open(text, code: code)
        }
        description = String(cString: cgpiod_output_description(opened))
        output = Mutex(opened)
    }

    deinit { release() }

    public func setActive(_ active: Bool) throws {
        try output.withLock { output throws(HapticsError) in
            guard let output else { throw .released(description) }
            // On the stack: this is on the way from a message to the motor.
            try withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer throws(HapticsError) in
                buffer[0] = 0
                guard cgpiod_output_set(output, active ? 1 : 0, buffer.baseAddress, buffer.count) == 0 else {
                    let code = errno
                    throw .set(String(cString: buffer.baseAddress!), code: code)
                }
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

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
