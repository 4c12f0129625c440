import Foundation
import Glibc
import GuidanceProtocol
import TestSupport
import Testing

/// `guidance-server token add|remove|list`, run as the built program, and a running server that
/// follows the tokens file without a restart.
@Suite struct TokenCommandTests {
    static let program = Spawned.buildFolder.appendingPathComponent("guidance-server").path

    static func run(_ arguments: [String]) async throws -> Command.Result {
        try await Command.executeAsync(program, arguments)
    }

    static func attribute(_ path: String, _ key: FileAttributeKey) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[key] as? NSNumber)?.intValue ?? -1
    }

    static func mode(_ path: String) -> Int { attribute(path, .posixPermissions) }

    @Test func addPrintsATokenOnceWritesAPrivateFileAndRefusesASecondWithoutReplace() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tokens-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let tokens = folder.appendingPathComponent("tokens.yaml").path
        let config = folder.appendingPathComponent("server.yaml").path
        try "server:\n  tokensFile: \(tokens)\nanalyzer:\n  kind: vision\n".write(toFile: config, atomically: true, encoding: .utf8)

        let added = try await Self.run(["token", "add", "car-1", "--config", config])
        #expect(added.status == 0, "\(added.stderr)")
        let token = added.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // 32 random bytes, base64url without padding.
        #expect(token.count == 43 && token.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }, "\(token)")
        #expect(Self.mode(tokens) == 0o600)
        #expect(try String(contentsOfFile: tokens, encoding: .utf8).contains("\"\(token)\": \"car-1\""))

        let again = try await Self.run(["token", "add", "car-1", "--config", config])
        #expect(again.status == 65 && again.stderr.contains("car-1 already has a token") && again.stdout.isEmpty, "\(again.stderr)")
        let replaced = try await Self.run(["token", "add", "car-1", "--replace", "--config", config])
        let newToken = replaced.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(replaced.status == 0 && newToken.count == 43 && newToken != token)
        let file = try String(contentsOfFile: tokens, encoding: .utf8)
        #expect(!file.contains(token) && file.contains(newToken))

        _ = try await Self.run(["token", "add", "car-2", "--config", config])
        let listed = try await Self.run(["token", "list", "--config", config])
        #expect(listed.stdout == "car-1\ncar-2\n", "the devices, never the tokens")
        // Run as root on a file the server's user owns, the file stays that user's (else the
        // server could not read it any more).
        if getuid() == 0 {
            chown(tokens, 65534, 65534)
            _ = try await Self.run(["token", "add", "car-3", "--config", config])
            #expect(Self.attribute(tokens, .ownerAccountID) == 65534 && Self.attribute(tokens, .groupOwnerAccountID) == 65534)
            #expect(Self.mode(tokens) == 0o600)
        }
        let badID = try await Self.run(["token", "add", "car 3: x", "--config", config])
        #expect(badID.status == 65 && badID.stderr.contains("is not a device id"), "\(badID.stderr)")
    }

    /// A running server and the token `token add car-9` printed for it.
    static func serverWithAddedToken(server keys: [String: String] = [:]) async throws -> (ServerProcess, config: String, token: String) {
        let server = try await ServerProcess(server: keys)
        let config = server.folder.appendingPathComponent("server.yaml").path
        let added = try await Self.run(["token", "add", "car-9", "--config", config])
        try #require(added.status == 0, "\(added.stderr)")
        return (server, config, added.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func aRunningServerTakesAnAddedTokenAndDropsARemovedOneWithoutARestart() async throws {
        let (server, config, token) = try await Self.serverWithAddedToken()
        defer { server.stop() }

        let accepted = try RawClient(port: server.port).upgrade(token: token)
        #expect(accepted.status == 101, "\(accepted.head)")
        #expect(
            server.process.stderr.contains("tokens:") && server.process.stderr.contains("changed; 3 device token(s) in force"),
            "\(server.process.stderr.suffix(2000))")
        // The devices that were there keep working.
        #expect(try RawClient(port: server.port).upgrade(token: "good-token").status == 101)

        let removed = try await Self.run(["token", "remove", "car-9", "--config", config])
        try #require(removed.status == 0, "\(removed.stderr)")
        #expect(try RawClient(port: server.port).upgrade(token: token).status == 401)
        #expect(server.process.process.isRunning)
    }

    /// A device whose token is removed while it streams: its live session is told and closed with
    /// 4401 (within a poll), not left running until the car next reconnects. Neither session reads
    /// while the token goes, so neither answers the server's ping: the idle timeout is set past
    /// the test's length, or a busy machine sees them closed as idle (4001) first.
    @Test func removingATokenEndsThatDevicesLiveSession() async throws {
        let (server, config, token) = try await Self.serverWithAddedToken(server: ["idleTimeoutSeconds": "3600"])
        defer { server.stop() }
        let (live, _) = try await ServerHardeningTests.offPool { try ServerHardeningTests.session(port: server.port, token: token) }
        let (other, _) = try await ServerHardeningTests.offPool {
            try ServerHardeningTests.session(port: server.port, token: "other-token")
        }
        let removed = try await Self.run(["token", "remove", "car-9", "--config", config])
        try #require(removed.status == 0, "\(removed.stderr)")
        let (close, texts) = try await ServerHardeningTests.offPool { () -> (Int?, [String]) in
            live.setReceiveTimeout(milliseconds: 30_000)
            let texts = try live.readTexts(until: "unauthorized")
            var seen: [UInt8] = []
            return (try live.readUntilClose(answerPings: true, seen: &seen), texts)
        }
        #expect(texts.last?.contains("unauthorized") == true, "\(texts)")
        #expect(close == Int(CloseCode.unauthorized.rawValue))
        // Another device's session goes on.
        let clip = await SampleSegment.clip(2)
        let acked = try await ServerHardeningTests.offPool { () -> [String] in
            try other.sendText(ServerHardeningTests.header(seq: 1, durationMs: 5000, bytes: clip.count, chunks: 1, sha: sha256Hex(clip)))
            try other.sendFrame(.binary, clip)
            return try other.readTexts(until: #""ack""#)
        }
        #expect(acked.last?.contains(#""ack""#) == true, "\(acked)")
    }
}
