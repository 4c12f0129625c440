import Foundation
import Synchronization
public import HAL
public import Logging
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

    public init(receiver: any GPSReceiver, track: GPSTrackStore, board: StatusBoard, logger: Logger) {
        self.receiver = receiver
        self.track = track
        self.board = board
        self.logger = logger
    }

    public func run() async throws {
        board.update { $0.gps = .init(gpsd: receiver.name, state: "connecting") }
        let state = Mutex<(mode: Int, lost: Int)>((-1, 0))
        await cancelWhenGracefulShutdown {
            await receiver.run { [track, board, logger] event in
                switch event {
                case .connected(let release):
                    logger.info("gps: connected to gpsd \(release) at \(receiver.name)")
                    state.withLock { $0.lost = 0 }
                    board.update {
                        $0.gps?.state = "connected"
                        $0.gps?.problem = nil
                    }
                case .fix(let fix):
                    let now = Date()
                    track.add(fix, at: now)
                    let changed = state.withLock { state in
                        defer { state.mode = fix.mode }
                        return state.mode != fix.mode
                    }
                    if changed { logger.info("gps: \(fix.modeName)\(fix.hasPosition ? "" : "; segments carry no position until a fix")") }
                    board.update { $0.gps?.fix = .init(fix, at: now) }
                case .lost(let reason, let retryIn):
                    let count = state.withLock { state in
                        state.lost += 1
                        state.mode = -1
                        return state.lost
                    }
                    if count == 1 || count % 20 == 0 {
                        logger.warning("gps: no gpsd at \(receiver.name): \(reason); trying again in \(retryIn)")
                    }
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
