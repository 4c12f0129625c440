import GuidanceServer

/// One device's line in `usage` and `credit`.
struct UsageReport: Encodable {
    var device: String
    var creditedSeconds: Int
    var spentSeconds: Int
    var segments: Int
    var remainingSeconds: Int?
    /// Tokens hosted models spent on the device's segments.
    var inputTokens: Int
    var outputTokens: Int

    init(_ balance: DeviceBalance, allowance: Int?) {
        device = balance.device
        creditedSeconds = balance.creditedSeconds
        spentSeconds = balance.spentSeconds
        segments = balance.segments
        remainingSeconds = balance.remaining(allowance: allowance)
        inputTokens = balance.inputTokens
        outputTokens = balance.outputTokens
    }

    func encode(to encoder: any Encoder) throws {
        enum Keys: String, CodingKey { case device, creditedSeconds, spentSeconds, segments, remainingSeconds, inputTokens, outputTokens }
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(device, forKey: .device)
        try container.encode(creditedSeconds, forKey: .creditedSeconds)
        try container.encode(spentSeconds, forKey: .spentSeconds)
        try container.encode(segments, forKey: .segments)
        // null is unlimited, written out.
        try container.encode(remainingSeconds, forKey: .remainingSeconds)
        try container.encode(inputTokens, forKey: .inputTokens)
        try container.encode(outputTokens, forKey: .outputTokens)
    }

    /// The column titles above ``line``s.
    static let header = columns("device", "credited", "spent", "segments", "remaining")

    var line: String {
        Self.columns(
            device, String(creditedSeconds), String(spentSeconds), String(segments), remainingSeconds.map(String.init) ?? "unlimited")
    }

    /// Device left-aligned, numbers right-aligned. (Not `String(format: "%d")`, which reads 32 bits
    /// of a 64-bit Int on Linux: a balance past 2^31 printed wrong.)
    static func columns(_ device: String, _ credited: String, _ spent: String, _ segments: String, _ remaining: String) -> String {
        func right(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
        let padded = device + String(repeating: " ", count: max(0, 18 - device.count))
        return "\(padded) \(right(credited, 12)) \(right(spent, 10)) \(right(segments, 9))  \(remaining)"
    }
}
