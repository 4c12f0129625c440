import Foundation
import HAL
import UTC

extension Segment {
    /// One line of JSON: the metadata's keys and the notes' (`gps`, `clock`, `parking`), times in
    /// RFC 3339 UTC with milliseconds, keys sorted, plus the file name.
    public func jsonLine(file: String? = nil) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.rfc3339Milliseconds)
        }
        return String(decoding: try encoder.encode(Line(metadata: metadata, notes: notes, file: file)), as: UTF8.self)
    }
}

private struct Line: Encodable {
    enum Key: CodingKey { case file }
    let metadata: SegmentMetadata
    let notes: SegmentNotes
    let file: String?

    func encode(to encoder: any Encoder) throws {
        try metadata.encode(to: encoder)
        try notes.encode(to: encoder)
        var container = encoder.container(keyedBy: Key.self)
        try container.encodeIfPresent(file, forKey: .file)
    }
}
