import Foundation
import GuidanceProtocol
import Synchronization
import HAL
import Logging
public import ServiceLifecycle

/// The GPS's part of the agent: runs the gpsd client (``GpsdClient``), puts every fix into the
/// track the segments are cut from (``GPSTrackStore``), and keeps `status` up to date: gpsd there
/// or not, the fix, its position, speed and heading. A gpsd that goes away is tried again; the
/// recording never waits for it.
public struct GPSService: Service {
    let receiver: any GPSReceiver
    let track: GPSTrackStore
    let board: StatusBoard
    let logger: Logger

    /// What the log hears of a receiver's changes and of a peer's bad lines: at most one line per
    /// kind a while, the next one telling how many were left out. `status` always has the state.
    struct Logs {
        var mode = RateLimit(interval: .seconds(10))
        var unreadable = RateLimit(interval: .seconds(10))
        var lost = RateLimit(interval: .seconds(60))
        var lastMode = -1

        static func more(_ count: Int) -> String { count > 0 ? " (\(count) more like it not logged)" : "" }
    }

    public func run() async throws {
        board.update { $0.gps = .init(gpsd: receiver.name, state: "connecting") }
        let logs = Mutex(Logs())
        await cancelWhenGracefulShutdown {
            await receiver.run { [track, board, logger, receiver] event in
                let now = MonotonicClock.now()
                switch event {
                case .connected(let release):
                    logger.info("gps: connected to gpsd \(release) at \(receiver.name)")
                    board.update {
                        $0.gps?.state = "connected"
                        $0.gps?.problem = nil
                    }
                case .fix(let fix):
                    let at = Date()
                    track.add(fix, at: at)
                    let line: String? = logs.withLock { logs in
                        defer { logs.lastMode = fix.mode }
                        guard logs.lastMode != fix.mode, let left = logs.mode.admit(now: now) else { return nil }
                        return "gps: \(fix.modeName)\(fix.hasPosition ? "" : "; segments carry no position until a fix")\(Logs.more(left))"
                    }
                    if let line { logger.info("\(line)") }
                    board.update { $0.gps?.fix = .init(fix, at: at) }
                case .unreadable(let what):
                    let line: String? = logs.withLock { logs in
                        logs.unreadable.admit(now: now).map { "gps: from \(receiver.name): \(what)\(Logs.more($0))" }
                    }
                    if let line { logger.warning("\(line)") }
                case .lost(let reason, let retryIn):
                    let line: String? = logs.withLock { logs in
                        logs.lastMode = -1
                        return logs.lost.admit(now: now).map {
                            "gps: no gpsd at \(receiver.name): \(reason); trying again in \(retryIn)\(Logs.more($0))"
                        }
                    }
                    if let line { logger.warning("\(line)") }
                    board.update {
                        $0.gps?.state = "disconnected"
                        $0.gps?.problem = reason
                        $0.gps?.fix = nil
                    }
                }
            }
        }
    }
}
