public import ArgumentParser

public struct DashcamAgentCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "dashcam-agent",
        abstract: "Records a V4L2 camera as HEVC segments and streams them for driver guidance.",
        version: AgentVersion.current,
        subcommands: [
            RecordCommand.self, ProbeCommand.self, SetupCommand.self, DoctorCommand.self, StatusCommand.self, SayStatusCommand.self,
            PairCommand.self, ProtectCommand.self
        ]
    )

    public init() {}
}
