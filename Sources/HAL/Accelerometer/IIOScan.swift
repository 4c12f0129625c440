import Foundation

/// The records an IIO device writes to its buffered character device (`/dev/iio:deviceN`), as
/// the kernel describes them in `scan_elements/`: each enabled channel's `_index` (its order in a
/// record) and `_type` (`le:s12/16>>4`: little-endian, signed, 12 bits of value stored in 16,
/// shifted left by 4; `X2` after the storage bits would repeat it). A channel starts at a multiple
/// of its own storage size, and the record is padded to a multiple of the largest.
///
/// Pure and bounded: the text and the bytes come from a driver, and a fuzz target (`iio`) feeds
/// them anything.
public struct IIOScanType: Sendable, Equatable, CustomStringConvertible {
    public var bigEndian: Bool
    public var signed: Bool
    /// Bits of value.
    public var realBits: Int
    /// Bits each value takes in the record: 8, 16, 32 or 64.
    public var storageBits: Int
    /// Values of this type side by side (the first is read).
    public var repeatCount: Int
    /// Right shift that brings the value down to bit 0.
    public var shift: Int

    public static let maxRepeat = 8

    /// Parses `[be|le]:[s|u]BITS/STORAGE[Xrepeat]>>SHIFT`; nil for anything else or out of range.
    public init?(_ text: String) {
        let text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.utf8.count <= 32 else { return nil }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0] == "le" || parts[0] == "be" else { return nil }
        bigEndian = parts[0] == "be"
        var rest = Substring(parts[1])
        guard let sign = rest.first, sign == "s" || sign == "u" else { return nil }
        signed = sign == "s"
        rest = rest.dropFirst()
        let shifted = rest.split(separator: ">", omittingEmptySubsequences: false)
        guard shifted.count == 3, shifted[1].isEmpty, let shift = Self.number(shifted[2]) else { return nil }
        let sizes = shifted[0].split(separator: "/", omittingEmptySubsequences: false)
        guard sizes.count == 2, let real = Self.number(sizes[0]) else { return nil }
        let storage = sizes[1].split(separator: "X", omittingEmptySubsequences: false)
        guard (1...2).contains(storage.count), let storageBits = Self.number(storage[0]) else { return nil }
        let repeatCount = storage.count == 2 ? Self.number(storage[1]) : 1
        guard let repeatCount, (1...Self.maxRepeat).contains(repeatCount),
            [8, 16, 32, 64].contains(storageBits), (1...storageBits).contains(real), shift < storageBits, real + shift <= storageBits
        else { return nil }
        realBits = real
        self.storageBits = storageBits
        self.repeatCount = repeatCount
        self.shift = shift
    }

    /// Bytes the channel takes in a record.
    public var storageBytes: Int { storageBits / 8 * repeatCount }

    public var description: String {
        "\(bigEndian ? "be" : "le"):\(signed ? "s" : "u")\(realBits)/\(storageBits)" + (repeatCount > 1 ? "X\(repeatCount)" : "")
            + ">>\(shift)"
    }

    /// The (first) value stored at `offset` of `bytes`, sign-extended; nil if it does not fit.
    public func value(in bytes: [UInt8], at offset: Int) -> Int64? {
        let size = storageBits / 8
        guard offset >= 0, offset <= bytes.count - size else { return nil }
        var raw: UInt64 = 0
        for i in 0..<size {
            let byte = UInt64(bytes[offset + (bigEndian ? i : size - 1 - i)])
            raw = raw << 8 | byte
        }
        raw >>= UInt64(shift)
        if realBits < 64 { raw &= (UInt64(1) << UInt64(realBits)) - 1 }
        guard signed, realBits < 64, raw & (UInt64(1) << UInt64(realBits - 1)) != 0 else { return Int64(bitPattern: raw) }
        return Int64(bitPattern: raw | ~((UInt64(1) << UInt64(realBits)) - 1))
    }

    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 3, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }
}

/// Where each enabled channel is in a record, and how long a record is.
public struct IIOScanLayout: Sendable, Equatable {
    public struct Channel: Sendable, Equatable {
        public var name: String
        public var index: Int
        public var type: IIOScanType
        /// Bytes from the record's start.
        public var offset: Int
    }

    /// By index, as they come in a record.
    public let channels: [Channel]
    public let recordBytes: Int
    public static let maxRecordBytes = 1024

    /// Nil for no channel, two channels with one index, a negative index, or a record over
    /// ``maxRecordBytes``.
    public init?(_ enabled: [(name: String, index: Int, type: IIOScanType)]) {
        let sorted = enabled.sorted { $0.index < $1.index }
        guard !sorted.isEmpty, sorted.allSatisfy({ $0.index >= 0 }), Set(sorted.map(\.index)).count == sorted.count else { return nil }
        var offset = 0, largest = 1
        var channels: [Channel] = []
        for channel in sorted {
            let size = channel.type.storageBytes
            offset = (offset + size - 1) / size * size
            channels.append(Channel(name: channel.name, index: channel.index, type: channel.type, offset: offset))
            offset += size
            largest = max(largest, size)
            guard offset <= Self.maxRecordBytes else { return nil }
        }
        recordBytes = (offset + largest - 1) / largest * largest
        guard recordBytes <= Self.maxRecordBytes else { return nil }
        self.channels = channels
    }

    /// The value of the channel `name` in the record that starts at `start` of `bytes`.
    public func value(_ name: String, in bytes: [UInt8], record start: Int = 0) -> Int64? {
        guard let channel = channels.first(where: { $0.name == name }), start >= 0, start <= bytes.count - recordBytes else { return nil }
        return channel.type.value(in: bytes, at: start + channel.offset)
    }
}
