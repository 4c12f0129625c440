import NIOCore
import Synchronization

extension WebSocketConnection {
    /// One connect: happy-eyeballs candidates, each with its upgrade; the first outcome (upgrade,
    /// failure, deadline or cancellation) decides it, and every channel is closed unless it upgraded.
    final class ConnectAttempt: Sendable {
        let result: EventLoopPromise<Upgrade>
        private struct State {
            var candidates: [(channel: any Channel, upgrade: EventLoopFuture<Upgrade>)] = []
            var over = false
        }
        private let state = Mutex(State())

        init(_ result: EventLoopPromise<Upgrade>) { self.result = result }

        /// False once the attempt is over: the caller fails the candidate.
        func add(_ channel: any Channel, upgrade: EventLoopFuture<Upgrade>) -> Bool {
            state.withLock { state in
                state.candidates.append((channel, upgrade))
                return !state.over
            }
        }

        /// The connect picked `channel`: its upgrade decides.
        func connected(_ channel: any Channel) {
            let upgrade = state.withLock { $0.candidates.first { $0.channel === channel }?.upgrade }
            guard let upgrade else { return finish(.failure(ChannelError.inappropriateOperationForState)) }
            upgrade.whenComplete { self.finish($0) }
        }

        func finish(_ outcome: Result<Upgrade, any Error>) {
            let (won, channels) = state.withLock { state in
                defer { state.over = true }
                return (!state.over, state.candidates.map(\.channel))
            }
            if won { result.completeWith(outcome) }
            switch (won, outcome) {
            case (true, .success(.upgraded)): break
            case (true, _): channels.forEach { $0.close(promise: nil) }
            case (false, .success(.upgraded(let late))): late.channel.close(promise: nil)
            case (false, _): break
            }
        }
    }
}
