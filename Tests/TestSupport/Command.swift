public import Foundation

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

    /// Runs to completion; stderr goes through a file so neither pipe can fill up and stall it.
    public static func execute(_ tool: String, _ arguments: [String], environment: [String: String]? = nil) throws -> Result {
        let process = Process()
        process.executableURL = tool.hasPrefix("/") ? URL(fileURLWithPath: tool) : URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = tool.hasPrefix("/") ? arguments : [tool] + arguments
        if let environment { process.environment = environment }
        let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("cmd-\(UUID().uuidString).err")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let errorHandle = try FileHandle(forWritingTo: errorFile)
        let out = Pipe()
        process.standardOutput = out
        process.standardError = errorHandle
        try process.run()
        let stdout = try out.fileHandleForReading.readToEnd() ?? Data()
        process.waitUntilExit()
        try errorHandle.close()
        let stderr = try Data(contentsOf: errorFile)
        return Result(status: process.terminationStatus,
                      stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }
}
