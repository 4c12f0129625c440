import ConfigSupport
import Foundation
import Glibc
@testable import GuidanceServer
import Testing

/// The tokens file as a fleet has it: read by walking the composed YAML mapping once.
@Suite struct StaticDeviceTokensTests {
    @Test func aFleetsTokensFileIsReadWhole() throws {
        var text = "# Device tokens of the guidance server\n"
        for i in 0..<3000 {
            // Both forms an operator may write: plain, and quoted as `guidance-server token` writes.
            text += i.isMultiple(of: 2) ? "tok-\(i): car-\(i)\n" : "\"tok-\(i)\": \"car-\(i)\"\n"
        }
        let tokens = try Self.read(text)
        #expect(tokens.devices.count == 3000)
        #expect(tokens.device(authorization: "Bearer tok-0") == "car-0")
        #expect(tokens.device(authorization: "Bearer tok-1") == "car-1")
        #expect(tokens.device(authorization: "Bearer tok-2999") == "car-2999")
        #expect(tokens.device(authorization: "Bearer tok-3000") == nil)
        #expect(tokens.device(authorization: "tok-0") == nil)
        // Spaces and tabs around the token are not part of it; anything else is.
        #expect(tokens.device(authorization: "Bearer  tok-0 \t") == "car-0")
        #expect(tokens.device(authorization: "Bearer \ttok-1") == "car-1")
        #expect(tokens.device(authorization: "Bearer tok-0x") == nil)
        #expect(tokens.device(authorization: "Bearer tok 0") == nil)
        #expect(tokens.device(authorization: "Bearer ") == nil)
        #expect(tokens.device(authorization: "bearer tok-0") == nil)
    }

    @Test(arguments: ["a: [x]\n", "- a\n", "a: b\na: c\n", "a: {b: c}\n", "just text\n", "{}\n", "\"\": car\n", "tok: \"\"\n"])
    func anythingButAMappingOfTokensToDevicesIsRefused(text: String) {
        #expect(throws: ConfigError.self, "\(text)") { try Self.read(text) }
    }

    @Test func aFileWithNoTokenLeftIsReadWhenItChanges() throws {
        // What `guidance-server token remove` leaves after the last device: the server reads it
        // again as "no device", not as an error.
        #expect(try Self.read("# comment\n{}\n", allowEmpty: true).isEmpty)
    }

    /// The sessions' checks read the file once a tick (`refresh`), then look every session up
    /// in what was read (`knownDevice`), which never looks at the file itself.
    @Test func knownDeviceLooksUpWhatWasReadAndRefreshReadsTheChange() throws {
        try Self.withFile("tok-a: car-a\ntok-b: car-b\n") { file in
            let tokens = try StaticDeviceTokens(file: file)
            #expect(tokens.knownDevice(authorization: "Bearer tok-a") == "car-a")
            // car-a's token removed: the file written again in place (its mode stays 0600).
            try Data("tok-b: car-b\n".utf8).write(to: URL(fileURLWithPath: file))
            #expect(tokens.knownDevice(authorization: "Bearer tok-a") == "car-a", "not read again until a refresh")
            tokens.refresh()
            #expect(tokens.knownDevice(authorization: "Bearer tok-a") == nil)
            #expect(tokens.knownDevice(authorization: "Bearer tok-b") == "car-b")
            #expect(tokens.knownDevice(authorization: "tok-b") == nil)
        }
    }

    /// A token moved to another device by a rewrite in place: same inode, same size, the same
    /// second. The modification time's nanoseconds tell it (set here, so the test does not
    /// depend on the file system's clock granularity).
    @Test func aRewriteOfTheSameSizeInTheSameSecondIsSeen() throws {
        try Self.withFile("tok-a: car-a\n") { file in
            try Self.setModified(file, seconds: 1_780_000_000, nanoseconds: 100)
            let tokens = try StaticDeviceTokens(file: file)
            #expect(tokens.device(authorization: "Bearer tok-a") == "car-a")
            let handle = try #require(FileHandle(forWritingAtPath: file))
            try handle.write(contentsOf: Data("tok-a: car-b\n".utf8))
            try handle.close()
            try Self.setModified(file, seconds: 1_780_000_000, nanoseconds: 100)
            #expect(tokens.device(authorization: "Bearer tok-a") == "car-a", "inode, size and time as before: not read again")
            // 10 ns later: as seconds in a Double (Foundation's dates) the two times are one.
            try Self.setModified(file, seconds: 1_780_000_000, nanoseconds: 110)
            #expect(tokens.device(authorization: "Bearer tok-a") == "car-b")
        }
    }

    private static func setModified(_ file: String, seconds: Int, nanoseconds: Int) throws {
        var times = [timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
        guard utimensat(AT_FDCWD, file, &times, 0) == 0 else { throw CocoaError(.fileWriteUnknown) }
    }

    private static func read(_ text: String) throws -> StaticDeviceTokens {
        try withFile(text) { try StaticDeviceTokens(file: $0) }
    }

    private static func read(_ text: String, allowEmpty: Bool) throws -> [String: String] {
        try withFile(text) { try StaticDeviceTokens.parse(file: $0, key: "server.tokensFile", allowEmpty: allowEmpty) }
    }

    private static func withFile<T>(_ text: String, _ body: (String) throws -> T) throws -> T {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tokens-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("tokens.yaml").path
        guard FileManager.default.createFile(atPath: file, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown)
        }
        return try body(file)
    }
}
