public import Foundation
import Glibc
import NIOConcurrencyHelpers

/// Debian's PostgreSQL (`postgresql`, installed by `scripts/install-deps.sh`), started once per
/// test process with its own data folder in a temporary directory, on a free loopback port, with
/// trust authentication for `postgres` on loopback. It runs as the `postgres` system user, since
/// PostgreSQL refuses to run as root, and is stopped when the process exits.
public final class PostgresServer: Sendable {
    public let port: Int
    public let folder: URL
    let bin: String

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// The one server of this test process, started on first use; on a thread of its own, since
    /// starting it blocks (and the few threads every test's tasks share must not be).
    public static func shared() async throws -> PostgresServer {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Swift.Result { try started.get() }) }
        }
    }

    private static let started = Result { try PostgresServer() }

    /// The newest installed version's programs (Debian 12 has 15, Debian 13 has 17).
    static func binaries() -> String? {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        return versions.compactMap(Int.init).sorted().reversed()
            .map { "/usr/lib/postgresql/\($0)/bin" }
            .first {
                FileManager.default.isExecutableFile(atPath: "\($0)/initdb")
                    && FileManager.default.isExecutableFile(atPath: "\($0)/postgres")
            }
    }

    private init() throws {
        guard let bin = Self.binaries() else {
            throw Failure(
                description:
                    "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb); scripts/install-deps.sh installs Debian's postgresql")
        }
        self.bin = bin
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("postgres-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        port = try Self.freePort()
        // As root, PostgreSQL's own user owns the folder and runs the programs.
        if getuid() == 0 {
            guard let user = getpwnam("postgres") else {
                throw Failure(description: "no 'postgres' user (Debian's postgresql package makes it)")
            }
            chown(folder.path, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        let data = folder.appendingPathComponent("data").path
        try run("\(bin)/initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
        try run(
            "\(bin)/pg_ctl",
            [
                "-D", data, "-w", "-t", "60", "-l", folder.appendingPathComponent("log").path,
                "-o", "-p \(port) -k \(folder.path) -c listen_addresses=127.0.0.1 -c fsync=off", "start"
            ])
        let stop = "\(bin)/pg_ctl"
        Self.stopAtExit.withLockedValue { $0.append((stop, data)) }
        atexit {
            for (pgctl, data) in PostgresServer.stopAtExit.withLockedValue({ $0 }) {
                _ = try? PostgresServer.spawnAndWait(pgctl, ["-D", data, "-m", "immediate", "stop"], output: "/dev/null")
                try? FileManager.default.removeItem(at: URL(fileURLWithPath: data).deletingLastPathComponent())
            }
        }
    }

    /// Servers to stop (and folders to remove) when the process exits: pg_ctl, data folder.
    static let stopAtExit = NIOLockedValueBox<[(String, String)]>([])

    static let asPostgres = ["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]

    /// Runs a PostgreSQL program (as `postgres` when this process is root); throws with its output.
    func run(_ program: String, _ arguments: [String]) throws {
        let output = folder.appendingPathComponent("\(URL(fileURLWithPath: program).lastPathComponent).out").path
        let status = try Self.spawnAndWait(program, arguments, output: output)
        guard status == 0 else {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            let log = (try? String(contentsOf: folder.appendingPathComponent("log"), encoding: .utf8)) ?? ""
            throw Failure(
                description: "\(program) \(arguments.joined(separator: " ")): exit \(status): \(text.suffix(2000)) \(log.suffix(2000))")
        }
    }

    /// Starts `program` (through setpriv as `postgres` when this process is root) with its output
    /// in the file `output`, waits for it, and returns its exit status (128 + signal if killed).
    ///
    /// Not `Process`: it learns of a child's end from a socket the child inherits, and the server
    /// `pg_ctl start` leaves running inherits that too, so `pg_ctl` would never be seen to end.
    /// Descriptors past stderr are closed in the child for the same reason.
    static func spawnAndWait(_ program: String, _ arguments: [String], output: String) throws -> Int32 {
        let root = getuid() == 0
        let executable = root ? "/usr/bin/setpriv" : program
        let argv = [executable] + (root ? asPostgres + [program] + arguments : arguments)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // (glibc ignores a close of a descriptor that is closed by then.)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            if let fd = Int32(name), fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        }
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, executable, &actions, nil, cArguments, environ)
        guard spawned == 0 else { throw Failure(description: "cannot start \(executable): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw Failure(description: "waiting for \(program): errno \(errno)") }
        }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import.
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    /// A new, empty database; its `postgres://` URL.
    public func createDatabase() async throws -> String {
        let name = "t" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
        let result = try await psql(database: "postgres", "CREATE DATABASE \(name)")
        guard result.status == 0 else { throw Failure(description: "CREATE DATABASE: \(result.stderr)") }
        return "postgres://postgres@127.0.0.1:\(port)/\(name)"
    }

    /// `psql` (Debian's client) on `database`, one command, unaligned output without headers.
    public func psql(database: String, _ command: String) async throws -> Command.Result {
        try await Command.executeAsync(
            "/usr/bin/psql",
            ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-Atc", command])
    }

    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "no free port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
