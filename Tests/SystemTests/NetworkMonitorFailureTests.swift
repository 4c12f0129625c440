import Foundation
import Glibc
import Synchronization
import Testing

@Suite struct NetworkMonitorFailureTests {
    /// With too few file descriptors left, starting fails at one step or another: each gives one
    /// clear sentence and exit status 1, never a crash. (With a few more, the monitor starts and
    /// the Swift runtime's own dispatch threads may then die for want of an eventfd: not ours.)
    @Test func runningOutOfDescriptorsIsAClearError() async throws {
        try NetNS.requireProbe()
        var errors: [String] = []
        for limit in 4...12 {
            let probe = try NetmonProbe.start(fileLimit: limit)
            let first = await probe.next(within: .seconds(60))
            let status = probe.stop()
            guard first?.event == "error" else { continue }
            #expect(probe.exitedNormally && status == 1, "netmon-probe with \(limit) descriptors: status \(status)")
            errors.append(first?.message ?? "")
        }
        #expect(!errors.isEmpty, "no limit made the monitor fail")
        for message in errors {
            #expect(message.hasPrefix("Cannot ") && message.hasSuffix("(errno 24)."), "\(message)")
        }
        print("netmon errors when out of descriptors: \(Set(errors).sorted())")
    }
}
