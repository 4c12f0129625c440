public import Foundation
import Glibc
import Testing

/// A program of this package (beside the test bundle) running in the background, its output
/// going to files the test reads while it runs.
public final class Spawned {
    public static let buildFolder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()

    public let process = Process()
    public let stdoutFile: URL
    public let stderrFile: URL
    /// The program's name and the arguments, for messages.
    public let name: String

    /// `prefix` runs first (e.g. `ip netns exec NAME`), with the program's path after it.
    /// `absolute`: `program` is a path, not one of this package's programs. `environment` is added
    /// to this process's.
    public init(
        _ program: String, _ arguments: [String], prefix: [String] = [], folder: URL, absolute: Bool = false,
        environment: [String: String] = [:]
    ) throws {
        let path = absolute ? program : Self.buildFolder.appendingPathComponent(program).path
        let stem = "\(URL(fileURLWithPath: program).lastPathComponent)-\(UUID().uuidString.prefix(8))"
        stdoutFile = folder.appendingPathComponent("\(stem).out")
        stderrFile = folder.appendingPathComponent("\(stem).err")
        self.name = ([URL(fileURLWithPath: program).lastPathComponent] + arguments).joined(separator: " ")
        _ = FileManager.default.createFile(atPath: stdoutFile.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrFile.path, contents: nil)
        if let first = prefix.first {
            process.executableURL = URL(fileURLWithPath: first)
            process.arguments = Array(prefix.dropFirst()) + [path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
        }
        process.standardOutput = try FileHandle(forWritingTo: stdoutFile)
        process.standardError = try FileHandle(forWritingTo: stderrFile)
        process.standardInput = FileHandle.nullDevice
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    public var pid: Int32 { process.processIdentifier }
    public var stdout: String { (try? String(contentsOf: stdoutFile, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOf: stderrFile, encoding: .utf8)) ?? "" }
    /// The lines of stdout written whole: a read may come while the last one is half written.
    public var wholeLines: [String] {
        stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    /// What each of its threads is doing, from /proc: name, state (R runs or waits for a CPU, S
    /// sleeps, D waits for the disk), the kernel function it waits in, and its CPU time in ticks.
    /// For the message of a test whose program did not end: starved, blocked, or stuck.
    public var threads: String {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.sorted().map { task in
            let folder = "/proc/\(pid)/task/\(task)/"
            let read = { (name: String) in (try? String(contentsOfFile: folder + name, encoding: .utf8)) ?? "" }
            // stat: "TID (comm) STATE ... utime stime ..." — the fields after the name's closing parenthesis.
            let fields = read("stat").split(separator: ")").last.map { $0.split(separator: " ") } ?? []
            let ticks = fields.count > 12 ? "\((Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0))" : "?"
            return "\(read("comm").trimmingCharacters(in: .whitespacesAndNewlines)) \(fields.first ?? "?") in \(read("wchan")) cpu \(ticks)"
        }.joined(separator: "; ")
    }

    /// Polls `condition` every 10 ms; false if `timeout` passes first.
    /// Sleeps between polls without holding one of the few threads every test's tasks run on.
    @discardableResult
    public func wait(for timeout: Duration, until condition: (Spawned) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(self) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self)
    }

    /// Sends `signal` and waits for the exit; the exit status. A program still running `limit`
    /// after the signal is a failure of the test that stops it: recorded with the end of its
    /// stderr, then killed, so the test ends instead of waiting for ever.
    @discardableResult
    public func stop(_ signal: Int32 = SIGTERM, limit: Duration = .seconds(120)) -> Int32 {
        if process.isRunning { kill(pid, signal) }
        if !process.exits(within: limit) {
            Issue.record(
                "\(name) (pid \(pid)) was still running \(limit) after signal \(signal); killed. Its stderr ends: \(stderr.suffix(3000))")
            kill(pid, SIGKILL)
        }
        process.waitUntilExit()
        return process.terminationStatus
    }

    public func count(_ text: String, in output: String) -> Int {
        output.components(separatedBy: text).count - 1
    }

    /// Open file descriptors and threads of the process, from /proc.
    public var resources: (fds: Int, threads: Int, rssKiB: Int) {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
            return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? -1
        }
        return (fds, field("Threads"), field("VmRSS"))
    }
}
