import ConfigSupport
public import Logging
public import ServiceLifecycle
import UnixSignals

extension AgentConfig {
    /// Keys SIGHUP applies while the agent runs; a change to any other key is logged as needing a
    /// restart. Their summaries say "Reloaded on SIGHUP", which a test keeps in step with this list.
    public static let reloadableKeys: Set<String> = [
        "recording.maxMegabytes", "recording.protectedMaxMegabytes", "recording.minFreeMegabytes",
        "haptics.clear", "haptics.alert", "log.level",
        "guidance.offlineAfterMs", "offline.enabled", "offline.repeatMs"
    ]
}

/// SIGHUP: reads the config again (same file, environment and flags) and applies what can change
/// while running. A config that does not load is reported and the running one stays.
public struct ConfigReloader: Sendable {
    public private(set) var running: AgentConfig
    let load: @Sendable () async throws -> AgentConfig
    let apply: @Sendable (AgentConfig) throws -> Void
    let logger: Logger

    /// `apply` gets a config whose reloadable keys are the new ones, and throws to refuse them.
    public init(
        running: AgentConfig, logger: Logger, load: @escaping @Sendable () async throws -> AgentConfig,
        apply: @escaping @Sendable (AgentConfig) throws -> Void
    ) {
        self.running = running
        self.load = load
        self.apply = apply
        self.logger = logger
    }

    /// What one reload did, by key name.
    public struct Outcome: Sendable, Equatable {
        public var applied: [String] = []
        public var needRestart: [String] = []
        public var error: String?
    }

    @discardableResult
    public mutating func reload() async -> Outcome {
        var outcome = Outcome()
        let new: AgentConfig
        do {
            new = try await load()
        } catch {
            outcome.error = "\(error)"
            logger.error("config: not reloaded, the agent goes on with the config it runs: \(error)")
            return outcome
        }
        let changed = ConfigKeyInfo.changes(in: AgentConfig.keys, from: running, to: new)
        var next = running
        for key in changed where AgentConfig.reloadableKeys.contains(key.name) {
            key.copy(from: new, to: &next)
            outcome.applied.append(key.name)
        }
        outcome.needRestart = changed.map(\.name).filter { !AgentConfig.reloadableKeys.contains($0) }
        if !outcome.applied.isEmpty {
            do {
                try apply(next)
            } catch {
                outcome.error = "\(error)"
                outcome.applied = []
                logger.error("config: not reloaded, the agent goes on with the config it runs: \(error)")
                return outcome
            }
            running = next
        }
        let summary = outcome.applied.isEmpty ? "nothing to apply" : "applied \(outcome.applied.joined(separator: ", "))"
        logger.notice("config: reloaded; \(summary)")
        if !outcome.needRestart.isEmpty {
            logger.warning(
                "config: \(outcome.needRestart.joined(separator: ", ")) changed and take effect only after a restart (systemctl restart dashcam-agent)"
            )
        }
        return outcome
    }
}

/// The reloader as a service: one reload per SIGHUP until the agent stops.
public struct ConfigReloadService: Service {
    let reloader: ConfigReloader
    /// Trapped before anything starts: SIGHUP's default would end the agent.
    let hangups: UnixSignalsSequence

    public func run() async {
        var reloader = reloader
        for await _ in hangups.cancelOnGracefulShutdown() { await reloader.reload() }
    }
}
