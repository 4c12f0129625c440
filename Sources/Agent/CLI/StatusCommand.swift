import ArgumentParser
import ConfigSupport
import Foundation

/// Where the running agent's control socket is: `--socket`, else `status.socket` from the config.
struct SocketOptions: ParsableArguments {
    @Option(help: "YAML config file the agent runs with (for status.socket).")
    var config: String?

    @Option(help: "The agent's control socket (overrides status.socket).")
    var socket: String?

    func path() async throws -> String {
        if let socket { return socket }
        return try await AgentConfig.load(file: config).status.socket
    }

    func ask(_ request: String) async throws -> String {
        let path: String
        do { path = try await self.path() } catch { throw ExitStatus.report(error) }
        do {
            return try await StatusSocket.ask(request, path: path)
        } catch {
            var standardError = StandardError()
            print("dashcam-agent: \(error)", to: &standardError)
            throw ExitCode(ExitStatus.noInput)
        }
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Print the running agent's state: camera, encoder, uplink, usage, last guidance, speech, haptics."
    )

    @OptionGroup var options: SocketOptions

    @Flag(help: "Print JSON instead of lines of text.")
    var json = false

    func run() async throws {
        let reply = try await options.ask("status")
        if json {
            print(reply.trimmingCharacters(in: .whitespacesAndNewlines))
            return
        }
        guard let status = try? JSONDecoder().decode(AgentStatus.self, from: Data(reply.utf8)) else {
            var standardError = StandardError()
            print("dashcam-agent: the agent answered something else than a status: \(reply.prefix(200))", to: &standardError)
            throw ExitCode(ExitStatus.failure)
        }
        print(status.text)
    }
}

struct SayStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "say-status",
        abstract: "Make the running agent speak the remaining usage."
    )

    @OptionGroup var options: SocketOptions

    func run() async throws {
        print(try await options.ask("say-status").trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

struct PairCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Make the running agent say its pairing code again, and print it.",
        discussion:
            "A car with neither uplink.tokenFile nor stored credentials pairs itself: it says a nine-digit code to type on the guidance server's page. Exit status 1 when it is not pairing (already paired, or pairing is off)."
    )

    @OptionGroup var options: SocketOptions

    func run() async throws {
        let reply = try await options.ask("pair")
        let answer = (try? JSONSerialization.jsonObject(with: Data(reply.utf8))) as? [String: Any]
        if let code = answer?["code"] as? String {
            print(code)
            return
        }
        var standardError = StandardError()
        print("dashcam-agent: \(answer?["error"] as? String ?? reply.trimmingCharacters(in: .whitespacesAndNewlines))", to: &standardError)
        throw ExitCode.failure
    }
}
