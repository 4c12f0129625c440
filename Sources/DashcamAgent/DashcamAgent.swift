import Agent
import ArgumentParser

@main
struct DashcamAgent: AsyncParsableCommand {
    static let configuration = DashcamAgentCommand.configuration
}
