import FileSupport
import Foundation
import Glibc

/// The order segments were recorded in, kept across restarts in `<dir>/.recording-order`: one
/// segment's file name a line, appended before the segment's file is written (so no kill leaves
/// a segment on the disk that the log does not name). Retention deletes by
/// this order, not by the time in a name: a board without a clock battery may record for a while
/// with a clock hours behind, or ahead, of the one it had before a step, and the footage it has
/// just recorded must not go before older footage stamped later.
///
/// A power cut may cut the last line short; such a line names no file and is passed over, and
/// the next name starts a line of its own. A name whose file never came (the write failed, or
/// the power went first) is passed over too. Files
/// the log does not name (recorded before it existed, or copied in) count as older than every
/// logged one, among themselves by the time in their names. The log is rewritten with only the
/// files still there once it names more than twice as many.
struct RecordingOrder {
    static let fileName = ".recording-order"

    private let file: URL
    /// File name → its place in the log.
    private(set) var places: [String: Int] = [:]
    private var lines = 0
    /// The log ends in a line cut short: the next name goes on a line of its own.
    private var cutShort = false

    init(root: URL) {
        file = root.appendingPathComponent(Self.fileName)
        let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        cutShort = !text.isEmpty && !text.hasSuffix("\n")
        for line in text.split(separator: "\n") where line.hasSuffix(".mp4") && !line.contains("/") {
            lines += 1
            places[String(line)] = lines
        }
    }

    /// `index` (by the time in the names) in recording order.
    func sorted(_ index: [StoredSegment]) -> [StoredSegment] {
        index.enumerated().sorted { a, b in
            let (x, y) = (places[a.element.name] ?? 0, places[b.element.name] ?? 0)
            return x != y ? x < y : a.offset < b.offset
        }.map(\.element)
    }

    /// Adds a segment about to be written; flushed before it returns, so before the segment's
    /// file can be there.
    mutating func append(_ name: String) {
        let fd = open(file.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let line = Array(((cutShort ? "\n" : "") + name + "\n").utf8)
        guard line.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == line.count else {
            // Part of it may be there: the next name starts a line of its own (an empty line is
            // passed over).
            cutShort = true
            return
        }
        cutShort = false
        fdatasync(fd)
        lines += 1
        places[name] = lines
    }

    /// Rewrites the log with `index`'s names only, in its order, when it has grown to more than
    /// twice their number.
    mutating func compact(keeping index: [StoredSegment]) {
        guard lines > 2 * index.count + 64 else { return }
        let names = index.map(\.name)
        do {
            try DurableFileWriter.write(
                Array((names.joined(separator: "\n") + (names.isEmpty ? "" : "\n")).utf8), to: file.path,
                temporary: file.deletingLastPathComponent().appendingPathComponent(".\(Self.fileName).partial").path)
            places = Dictionary(names.enumerated().map { ($1, $0 + 1) }, uniquingKeysWith: { $1 })
            lines = names.count
        } catch {
            // Kept as it was: a longer log orders the same.
        }
    }
}
