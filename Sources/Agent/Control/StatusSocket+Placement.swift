import Foundation
import Glibc
import NIOCore
import NIOPosix

/// Where the socket lives: a file made 0600 before anyone can reach it, removed at shutdown
/// only if it is still this agent's.
extension StatusSocket {
    public struct SetupError: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "\(path): \(reason)" }
    }

    /// Which file the socket is, so that shutting down removes it only if it is still ours.
    struct FileIdentity {
        let device: UInt
        let inode: UInt

        init?(_ path: String) {
            var info = stat()
            guard lstat(path, &info) == 0 else { return nil }
            device = UInt(info.st_dev)
            inode = UInt(info.st_ino)
        }

        func removeIfUnchanged(_ path: String) {
            guard let now = FileIdentity(path), now.device == device, now.inode == inode else { return }
            unlink(path)
        }
    }

    /// Binds in a fresh private folder beside `path`, where nobody else can reach the socket,
    /// makes it 0600, then renames it over `path` (replacing a socket an earlier run left).
    func bind(requests: AsyncStream<Request>.Continuation) async throws -> (any Channel, FileIdentity) {
        let folder = (path as NSString).deletingLastPathComponent
        let parent = folder.isEmpty ? "." : folder
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        var existing = stat()
        if lstat(path, &existing) == 0, existing.st_mode & S_IFMT != S_IFSOCK {
            throw SetupError(path: path, reason: "exists and is not a socket; remove it or choose another status.socket")
        }
        var template = Array("\(parent)/.sock-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SetupError(path: path, reason: "cannot make a private folder in \(parent): \(String(cString: strerror(errno)))")
        }
        let privateFolder = String(cString: made)
        let temporary = privateFolder + "/s"
        defer {
            unlink(temporary)
            rmdir(privateFolder)
        }
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 16)
            .childChannelInitializer { channel in setUp(channel, requests: requests) }
            .bind(unixDomainSocketPath: temporary).get()
        do {
            guard chmod(temporary, 0o600) == 0 else {
                throw SetupError(path: temporary, reason: "chmod 0600: \(String(cString: strerror(errno)))")
            }
            guard rename(temporary, path) == 0 else {
                throw SetupError(path: path, reason: "cannot move the socket into place: \(String(cString: strerror(errno)))")
            }
            guard let identity = FileIdentity(path) else {
                throw SetupError(path: path, reason: "the socket vanished as it was made: \(String(cString: strerror(errno)))")
            }
            return (server, identity)
        } catch {
            try? await server.close()
            throw error
        }
    }
}
