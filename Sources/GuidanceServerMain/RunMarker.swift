import Foundation
import GuidanceServer
import Logging
import Synchronization
import UTC

/// Tells the operator, when an instance starts, that its last run did not shut down: a file in the
/// server's state folder (`$STATE_DIRECTORY`, else the working folder), one per port, written when
/// the server listens and removed by a graceful shutdown. Found at the next start, it means the
/// process was killed (`kill -9`, the OOM killer), crashed, or lost its machine.
final class RunMarker: Sendable {
    private let path = Mutex<String?>(nil)

    /// Logs a run on `port` that did not end, then marks this one as running.
    func started(port: Int, logger: Logger) {
        let file = ServerConfig.inStateDirectory("guidance-server-\(port).running")
        if let since = try? String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) {
            logger.warning(
                """
                the last run on this port (started \(since)) ended without a shutdown: killed, crashed or its machine lost. \
                Its cars reconnect (here or at another instance) and send again what was not acknowledged; \
                the ledger charges each segment once
                """)
        }
        _ = FileManager.default.createFile(
            atPath: file, contents: Data("\(Date().rfc3339Milliseconds)\n".utf8),
            attributes: [.posixPermissions: 0o600])
        path.withLock { $0 = file }
    }

    /// A graceful shutdown: the next start has nothing to tell.
    func stopped() {
        guard let file = path.withLock({ $0 }) else { return }
        try? FileManager.default.removeItem(atPath: file)
    }
}
