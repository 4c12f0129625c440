public import Logging
import Synchronization

/// A setting that SIGHUP may change while the agent runs; readers always see the latest value.
public final class Reloadable<Value: Sendable>: Sendable {
    private let value: Mutex<Value>

    public init(_ initial: Value) {
        value = Mutex(initial)
    }

    public var current: Value {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// Standard error, at a level SIGHUP can change (`log.level`) for every logger already made.
public struct ReloadableLevelLogHandler: LogHandler {
    private var stream: StreamLogHandler
    private let level: Reloadable<Logger.Level>

    public init(label: String, level: Reloadable<Logger.Level>) {
        stream = StreamLogHandler.standardError(label: label)
        self.level = level
    }

    public var logLevel: Logger.Level {
        get { level.current }
        // One logger's level is the agent's level: there is only one `log.level`.
        set { level.current = newValue }
    }

    public var metadata: Logger.Metadata {
        get { stream.metadata }
        set { stream.metadata = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { stream[metadataKey: key] }
        set { stream[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        stream.log(event: event)
    }
}
