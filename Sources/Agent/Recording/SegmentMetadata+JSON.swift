import Foundation
public import HAL

extension SegmentMetadata {
    /// One line of JSON: times in RFC 3339 UTC with milliseconds, keys sorted, plus the file name.
    public func jsonLine(file: String? = nil) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.rfc3339Milliseconds)
        }
        return String(decoding: try encoder.encode(Line(metadata: self, file: file)), as: UTF8.self)
    }
}

private struct Line: Encodable {
    enum Key: CodingKey { case file }
    let metadata: SegmentMetadata
    let file: String?

    func encode(to encoder: any Encoder) throws {
        try metadata.encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encodeIfPresent(file, forKey: .file)
    }
}

extension Date {
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-22T04:17:17.569Z`: the form of `capturedAt`
    /// in the metadata lines and in protocol segment headers alike. By ``UTCTime``, which keeps
    /// ICU's time zone data out of memory.
    var rfc3339Milliseconds: String { UTCTime(self).rfc3339 }
}
