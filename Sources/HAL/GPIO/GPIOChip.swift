internal import CGPIOD
internal import Glibc

/// An open GPIO chip device: its name, label and lines, to find the one asked for and to say
/// who holds it. Closed when the last reference goes.
final class GPIOChip: CustomStringConvertible {
    /// The `errno` of a call that failed.
    struct Failure: Error {
        let code: Int32
    }

    struct LineInfo {
        /// The kernel's name of the line; empty if it has none.
        var name: String
        /// Who holds it (`gpioinfo` shows it); empty if no one does or the holder gave no name.
        var consumer: String
        var used: Bool
    }

    let path: String
    /// The kernel's name, e.g. `gpiochip0`.
    let name: String
    /// The driver's label, e.g. `pinctrl-bcm2711`; may be empty.
    let label: String
    let lineCount: Int
    private let handle: OpaquePointer

    init(path: String) throws(Failure) {
        guard let handle = cgpiod_chip_open(path) else { throw Failure(code: errno) }
        self.handle = handle
        self.path = path
        name = String(cString: cgpiod_chip_name(handle))
        label = String(cString: cgpiod_chip_label(handle))
        lineCount = Int(cgpiod_chip_num_lines(handle))
    }

    deinit { cgpiod_chip_close(handle) }

    /// `gpiochip0 [pinctrl-bcm2711]`, or the name alone when the chip has no label.
    var description: String { label.isEmpty ? name : "\(name) [\(label)]" }

    /// The offset of the first line called `name`; `ENOENT` if no line is.
    func offset(ofLine name: String) throws(Failure) -> Int {
        let offset = cgpiod_chip_find_line(handle, name)
        guard offset >= 0 else { throw Failure(code: errno) }
        return Int(offset)
    }

    /// What the kernel says of the line now; nil if that cannot be read.
    func lineInfo(_ offset: Int) -> LineInfo? {
        // The kernel keeps names to 32 bytes with the NUL.
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { name in
            withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { consumer in
                let used = cgpiod_chip_line_info(
                    handle, UInt32(offset), name.baseAddress, name.count,
                    consumer.baseAddress, consumer.count)
                guard used >= 0 else { return nil }
                return LineInfo(
                    name: String(cString: name.baseAddress!), consumer: String(cString: consumer.baseAddress!),
                    used: used == 1)
            }
        }
    }

    /// Requests the line as an output driven inactive; the result outlives this chip handle.
    func requestOutput(offset: Int, activeLow: Bool, consumer: String) throws(Failure) -> OpaquePointer {
        guard let output = cgpiod_output_request(handle, UInt32(offset), activeLow, consumer) else {
            throw Failure(code: errno)
        }
        return output
    }

    /// Requests the line as an input with edge events; the result outlives this chip handle.
    func requestInput(offset: Int, activeLow: Bool, consumer: String) throws(Failure) -> OpaquePointer {
        guard let input = cgpiod_input_request(handle, UInt32(offset), activeLow, consumer) else {
            throw Failure(code: errno)
        }
        return input
    }

    /// `/dev/gpiochipN` of every chip, by N ascending, as `gpiodetect` lists them.
    static func devicePaths() throws(Failure) -> [String] {
        guard let directory = opendir("/dev") else { throw Failure(code: errno) }
        defer { closedir(directory) }
        var numbers: [Int] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            let digits = name.utf8.dropFirst("gpiochip".utf8.count)
            guard name.hasPrefix("gpiochip"), !digits.isEmpty, digits.count <= 9,
                digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                let number = Int(String(decoding: digits, as: UTF8.self))
            else { continue }
            numbers.append(number)
        }
        return numbers.sorted().map { "/dev/gpiochip\($0)" }
    }
}
