import ArgumentParser
import Foundation

struct ProtectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "protect",
        abstract: "Keep recorded segments (an incident): the running agent moves them to protected/, which loop recording does not delete.",
        discussion: """
            Examples: `protect 42` (the newest segment numbered 42: numbers restart with each run, and the \
            reply names the files), `protect 40..45`, `protect 09:30..09:35` (local time, the latest such \
            time: a time of day more than an hour ahead is yesterday's), `protect 23:58..00:02`, \
            `protect 2026-11-23T09:30Z..2026-11-23T09:35Z`, `protect --last 2m` (the last two minutes and \
            the segment being recorded). A time range that reaches past the newest segment keeps the \
            segments still to come until its end, which may be at most 5 minutes ahead; a range lasts at most a \
            day. Protected segments have their own cap \
            (recording.protectedMaxMegabytes): a request makes room by deleting segments protected \
            before it, oldest first, never its own; what the cap cannot hold stays in the loop.
            """
    )

    @Argument(help: "A sequence number or range (`42`, `40..45`), or a time or time range (`09:30..09:35`, `…Z..…Z`, `now`).")
    var selection: String?

    @Option(help: "Protect the last DURATION instead (`90s`, `2m`, `1h`).")
    var last: String?

    @Flag(help: "Print the agent's JSON answer.")
    var json = false

    @OptionGroup var options: SocketOptions

    func run() async throws {
        let chosen: SegmentSelection
        do {
            switch (selection, last) {
            case (let text?, nil): chosen = try SegmentSelection.parse(text)
            case (nil, let duration?): chosen = try SegmentSelection.last(duration)
            default: throw ValidationError("give either a selection or --last DURATION")
            }
            try chosen.check(selection ?? "--last \(last ?? "")")
        } catch let error as SelectionError {
            throw ValidationError("\(error)")
        }
        let reply = try await options.ask(chosen.request).trimmingCharacters(in: .whitespacesAndNewlines)
        var standardError = StandardError()
        guard let result = try? JSONDecoder().decode(RecordingStore.Protection.self, from: Data(reply.utf8)) else {
            print("dashcam-agent: \(Self.error(in: reply))", to: &standardError)
            throw ExitCode(ExitStatus.failure)
        }
        if json {
            print(reply)
        } else {
            print(Self.text(result))
        }
        if result.protected.isEmpty && result.alreadyProtected == 0 && result.pendingUntilMs == nil {
            if result.overCap > 0 {
                print("dashcam-agent: not one segment of the selection fits under recording.protectedMaxMegabytes", to: &standardError)
                throw ExitCode(ExitStatus.failure)
            }
            print("dashcam-agent: no recorded segment matches '\(selection ?? "--last \(last ?? "")")'", to: &standardError)
            throw ExitCode(ExitStatus.noInput)
        }
    }

    static func text(_ result: RecordingStore.Protection) -> String {
        var lines = [
            "protected \(result.protected.count) segment(s)"
                + (result.alreadyProtected > 0 ? ", \(result.alreadyProtected) already were" : "")
        ]
        lines += result.protected.map { "  \($0)" }
        if let until = result.pendingUntilMs {
            lines.append(
                "segments recorded until \(Date(timeIntervalSince1970: Double(until) / 1000).formatted(date: .omitted, time: .standard)) are protected as they close"
            )
        }
        if result.overCap > 0 {
            lines.append(
                "\(result.overCap) older segment(s) of the selection stay in the loop: recording.protectedMaxMegabytes cannot hold them")
        }
        if !result.deleted.isEmpty {
            lines.append("deleted \(result.deleted.count) segment(s) protected earlier to stay under recording.protectedMaxMegabytes")
        }
        lines.append("protected now: \(result.protectedSegments) segments, \(AgentStatus.megabytes(result.protectedBytes))")
        return lines.joined(separator: "\n")
    }

    private static func error(in reply: String) -> String {
        let object = try? JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any]
        return object?["error"] as? String ?? "the agent answered something else: \(reply.prefix(200))"
    }
}
