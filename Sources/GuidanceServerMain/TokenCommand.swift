import ArgumentParser

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Give a device its token, take it away, or list the devices that have one (server.tokensFile).",
        discussion: """
            The tokens file is written whole (mode 0600) and renamed into place; a running server \
            reads it again at its next connection, so no restart is needed.
            """,
        subcommands: [Add.self, Remove.self, List.self])
}
