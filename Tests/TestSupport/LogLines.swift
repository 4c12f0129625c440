public import Logging
import Synchronization

/// Log lines, kept for a test to read.
public final class LogLines: Sendable {
    public init() {}

    private let lines = Mutex<[String]>([])
    private let kept = Mutex<[Entry]>([])

    /// A line with its level and metadata.
    public struct Entry: Sendable {
        public let level: Logger.Level
        public let message: String
        public let metadata: Logger.Metadata
    }

    public var all: [String] { lines.withLock { $0 } }

    public var entries: [Entry] { kept.withLock { $0 } }

    public func count(containing text: String) -> Int { all.filter { $0.contains(text) }.count }

    public var logger: Logger {
        var logger = Logger(label: "test") { _ in Handler(lines: self) }
        logger.logLevel = .debug
        return logger
    }

    fileprivate func append(_ event: LogEvent, metadata: Logger.Metadata) {
        lines.withLock { $0.append("\(event.level) \(event.message)") }
        kept.withLock { $0.append(Entry(level: event.level, message: "\(event.message)", metadata: metadata)) }
    }

    private struct Handler: LogHandler {
        let lines: LogLines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            lines.append(event, metadata: metadata.merging(event.metadata ?? [:]) { $1 })
        }
    }
}
