import Foundation
import HAL
public import Logging
import NIOPosix
public import ServiceLifecycle
import Synchronization

/// Watches the wall clock once a second (``ClockRules``): logs and shows in `status` each step
/// and where the time comes from, and answers the segmenter's question of the source for each
/// segment's metadata. chrony, when it runs, is asked its reference every 30 s (`chronyc -c
/// tracking`); without it a synchronised clock counts as NTP (systemd-timesyncd).
public final class ClockService: Service, Sendable {
    public static let chronyc = "/usr/bin/chronyc"
    let logger: Logger
    private let watch = Mutex(ClockRules())
    /// Where its state is shown; made after the pipeline, which asks this service already.
    private let board = Mutex<StatusBoard?>(nil)

    public init(logger: Logger) {
        self.logger = logger
    }

    public func show(on board: StatusBoard) { self.board.withLock { $0 = board } }

    /// The source now, for a segment's metadata (on the capture thread: answers at once).
    public var source: String { watch.withLock { $0.source } }

    public func run() async throws {
        var reference: String?
        var asked = ContinuousClock.now - .seconds(60)
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            if ContinuousClock.now - asked >= .seconds(30) {
                asked = ContinuousClock.now
                reference = (try? await NIOThreadPool.singleton.runIfActive { Self.chronyReference() }) ?? nil
            }
            let actions = watch.withLock { $0.sample(offset: WallClock.offset(), synced: WallClock.isSynchronised, reference: reference) }
            for action in actions {
                switch action {
                case .stepped(let seconds):
                    logger.notice(
                        "clock: stepped \(seconds > 0 ? "forward" : "back") by \(String(format: "%.3f", abs(seconds))) s; segments from the next on are dated by it"
                    )
                case .source(let from, let to):
                    logger.info("clock: source \(to) (was \(from))\(reference.map { ", chrony's reference \($0)" } ?? "")")
                }
            }
            let state = watch.withLock { $0 }
            board.withLock { $0 }?.update {
                $0.clock = .init(synced: state.synced, source: state.source, steps: state.steps, lastStepSeconds: state.lastStep)
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// chrony's reference now, or nil (no chrony, or it answers nothing).
    static func chronyReference() -> String? {
        guard FileManager.default.isExecutableFile(atPath: chronyc) else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: chronyc)
        process.arguments = ["-c", "-n", "tracking"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return ClockRules.chronyReference(String(decoding: output.prefix(4096), as: UTF8.self))
    }
}
