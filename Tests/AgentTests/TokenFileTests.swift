import Agent
import ConfigSupport
import Foundation
import GuidanceProtocol
import GuidanceServer
import HAL
import Hummingbird
import Logging
import Synchronization
import TestSupport
import Testing

@Suite struct TokenFileTests {
    @Test func aTokenFileOthersCanReadIsRefusedWithoutShowingTheToken() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("token-\(UUID().uuidString)").path
        try "s3cret-token\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        chmod(path, 0o644)
        #expect {
            _ = try TokenFile.read(path)
        } throws: { error in
            let text = "\(error)"
            return text.contains("readable by group or others (mode 644)") && text.contains(path) && !text.contains("s3cret")
        }
        chmod(path, 0o600)
        #expect(try TokenFile.read(path) == "s3cret-token")
    }
}
