public import Foundation
import Glibc

/// Runs a program found on `PATH` and collects its output.
public enum Command {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    @discardableResult
    public static func run(_ tool: String, _ arguments: [String], allowFailure: Bool = false) throws -> (stdout: String, stderr: String) {
        let result = try execute(tool, arguments)
        guard allowFailure || result.status == 0 else {
            throw Command.Failure(description: "\(tool) \(arguments.joined(separator: " ")) exited \(result.status): \(result.stderr)")
        }
        return (result.stdout, result.stderr)
    }

    /// `execute` on a thread of its own, so a slow tool does not hold one of the few threads
    /// that run every test's tasks.
    public static func executeAsync(_ tool: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Swift.Result { try execute(tool, arguments, environment: environment) }) }
        }
    }

    /// Runs to completion. Both outputs go through files: neither can fill up and stall the
    /// program, and a process it leaves behind (a daemon it started) cannot hold the call open.
    /// A program still running after `limit` (far beyond any this package's tests run) is killed,
    /// and the call throws, naming it with its arguments and the end of its stderr: a hang ends
    /// the test, not the run.
    public static func execute(
        _ tool: String, _ arguments: [String], environment: [String: String]? = nil,
        limit: Duration = .seconds(600)
    ) throws -> Result {
        let process = Process()
        process.executableURL = tool.hasPrefix("/") ? URL(fileURLWithPath: tool) : URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = tool.hasPrefix("/") ? arguments : [tool] + arguments
        if let environment { process.environment = environment }
        let stem = FileManager.default.temporaryDirectory.appendingPathComponent("cmd-\(UUID().uuidString)").path
        let (outputFile, errorFile) = (URL(fileURLWithPath: stem + ".out"), URL(fileURLWithPath: stem + ".err"))
        for file in [outputFile, errorFile] { _ = FileManager.default.createFile(atPath: file.path, contents: nil) }
        defer { for file in [outputFile, errorFile] { try? FileManager.default.removeItem(at: file) } }
        let (outputHandle, errorHandle) = (try FileHandle(forWritingTo: outputFile), try FileHandle(forWritingTo: errorFile))
        defer { try? outputHandle.close(); try? errorHandle.close() }
        process.standardOutput = outputHandle
        process.standardError = errorHandle
        try process.run()
        guard process.exits(within: limit) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let stderr = String(decoding: (try? Data(contentsOf: errorFile)) ?? Data(), as: UTF8.self)
            throw Failure(
                description:
                    "\(tool) \(arguments.joined(separator: " ")) was still running after \(limit); killed. Its stderr ends: \(stderr.suffix(3000))"
            )
        }
        return Result(
            status: process.terminationStatus,
            stdout: String(decoding: try Data(contentsOf: outputFile), as: UTF8.self),
            stderr: String(decoding: try Data(contentsOf: errorFile), as: UTF8.self))
    }
}

extension Process {
    /// Waits for the exit, at most `limit`; false if the program is still running then.
    /// Polls without a run loop, on whichever thread calls it.
    public func exits(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        while isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        return !isRunning
    }
}
