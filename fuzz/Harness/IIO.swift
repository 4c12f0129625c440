import HAL

/// What an IIO driver tells the agent about its buffered device: the scan elements' `_type`
/// texts and `_index` numbers (the input's first lines), and records of bytes read from
/// `/dev/iio:deviceN` (the rest). Every type that parses prints back as itself, every layout
/// keeps its channels inside the record, and every value read stays inside its bits.
enum IIO {
    static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        // Up to four lines of "TYPE INDEX", then the records.
        var channels: [(name: String, index: Int, type: IIOScanType)] = []
        var start = 0
        for name in ["x", "y", "z", "timestamp"] {
            guard let end = bytes[start...].firstIndex(of: UInt8(ascii: "\n")), end - start <= 64 else { break }
            let line = String(decoding: bytes[start..<end], as: UTF8.self)
            start = end + 1
            let fields = line.split(separator: " ")
            guard fields.count == 2, let index = Int(fields[1]) else { continue }
            guard let type = IIOScanType(String(fields[0])) else { continue }
            require(IIOScanType(type.description) == type, "\(type) does not read back as itself")
            require(type.storageBytes >= 1 && type.storageBytes <= 64, "\(type): \(type.storageBytes) bytes")
            channels.append((name, index, type))
        }
        guard let layout = IIOScanLayout(channels) else { return }
        require(layout.recordBytes <= IIOScanLayout.maxRecordBytes, "a record of \(layout.recordBytes) bytes")
        for channel in layout.channels {
            require(channel.offset % channel.type.storageBytes == 0, "\(channel.name) at \(channel.offset) is not aligned")
            require(channel.offset + channel.type.storageBytes <= layout.recordBytes, "\(channel.name) ends past its record")
        }
        let records = Array(bytes[start...])
        var record = 0
        while record + layout.recordBytes <= records.count, record < 64 * layout.recordBytes {
            for channel in layout.channels {
                let value = layout.value(channel.name, in: records, record: record)
                require(value != nil, "\(channel.name) unread in a whole record")
                let bits = channel.type.realBits
                if let value, bits < 64 {
                    let range: ClosedRange<Int64> =
                        channel.type.signed
                        ? -(Int64(1) << (bits - 1))...((Int64(1) << (bits - 1)) - 1) : 0...((Int64(1) << bits) - 1)
                    require(range.contains(value), "\(channel.name) = \(value) outside \(bits) bits")
                }
            }
            record += layout.recordBytes
        }
        // A record cut short is never read.
        require(
            layout.value(layout.channels[0].name, in: records, record: max(0, records.count - layout.recordBytes + 1)) == nil
                || records.count - layout.recordBytes + 1 <= 0, "a value read from a cut record")
    }
}
