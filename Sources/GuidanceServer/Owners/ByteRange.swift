import Foundation

/// The one byte range of an HTTP `Range` header a clip's download answers (RFC 9110 §14): the
/// whole file when there is none or it is not one this server reads, the bytes asked for, or
/// none (`416`) when they start past the end. Several ranges are answered with the whole file.
public enum ByteRange: Equatable, Sendable {
    case whole
    case part(ClosedRange<Int>)
    case unsatisfiable

    /// `header` as sent, for a file of `size` bytes. Numbers are checked before any arithmetic.
    public static func parse(_ header: String?, size: Int) -> ByteRange {
        guard let header, header.utf8.count <= 200, size >= 0 else { return .whole }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces),
            last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        func number(_ text: String) -> Int? {
            guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
            return Int(text)
        }
        if first.isEmpty {
            // The last N bytes.
            guard let suffix = number(last) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - suffix)...(size - 1))
        }
        guard let start = number(first) else { return .whole }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .part(start...(size - 1)) }
        guard let end = number(last), end >= start else { return .whole }
        return .part(start...min(end, size - 1))
    }
}
