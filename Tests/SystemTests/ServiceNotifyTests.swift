import Agent
import Foundation
import Glibc
import HAL
import Synchronization
import TestSupport
import Testing

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`; collects what arrives.
final class NotifyListener: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let received = Mutex<[(at: ContinuousClock.Instant, message: String)]>([])
    private let stopped = Atomic(false)
    private var thread: Thread?

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString.prefix(8))").path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0, "bind \(path): errno \(errno)")
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !stopped.load(ordering: .relaxed) {
                let count = recv(fd, &buffer, buffer.count, 0)
                guard count > 0 else { continue }
                let message = String(decoding: buffer[..<count], as: UTF8.self)
                received.withLock { $0.append((ContinuousClock.now, message)) }
            }
        }
        thread.start()
        self.thread = thread
    }

    var messages: [String] { received.withLock { $0.map(\.message) } }
    var timed: [(at: ContinuousClock.Instant, message: String)] { received.withLock { $0 } }

    func close() {
        stopped.store(true, ordering: .relaxed)
        Thread.sleep(forTimeInterval: 0.2)
        Glibc.close(fd)
        unlink(path)
    }
}

@Suite struct ServiceNotifyTests {
    @Test func readyComesOnceFramesFlowThenWatchdogPingsAndStoppingOnSIGTERM() async throws {
        let listener = try NotifyListener()
        defer { listener.close() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: RecordCommandTests.agent)
        process.arguments = [
            "record", "--config", RecordCommandTests.repo.appendingPathComponent("device-config/demo.yaml").path,
            "--out", folder.path
        ]
        process.environment = ProcessInfo.processInfo.environment.merging([
            "NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "400000",
            "DASHCAM_SPEECH_SINK": "wav:\(folder.path)/speech", "DASHCAM_STATUS_SOCKET": "\(folder.path)/status.sock"
        ]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let started = ContinuousClock.now
        try process.run()
        // Frames first (a loaded machine takes seconds), then the pings for a while.
        let deadline = ContinuousClock.now + .seconds(60)
        while !listener.messages.contains(where: { $0.hasPrefix("READY=1") }), process.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        // Pings after ready: waited for, however slowly a busy machine sends them.
        let pinged = await eventually {
            let messages = listener.messages
            guard let ready = messages.firstIndex(where: { $0.hasPrefix("READY=1") }) else { return false }
            return messages[ready...].filter { $0 == "WATCHDOG=1" }.count >= 5
        }
        process.terminate()
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        #expect(process.terminationStatus == 0)
        #expect(pinged, "\(listener.messages)")
        // The datagram is read by the listener's thread: waited for, not slept for.
        #expect(await eventually { listener.messages.contains { $0.hasPrefix("STOPPING=1") } }, "\(listener.messages)")

        let messages = listener.messages
        let ready = try #require(messages.firstIndex { $0.hasPrefix("READY=1") }, "\(messages)")
        #expect(messages[ready].contains("STATUS=recording test-pattern with libx265"))
        #expect(!messages[..<ready].contains("WATCHDOG=1"), "no watchdog ping before ready")
        // Pings every 200 ms (half of WATCHDOG_USEC) after ready.
        #expect(messages[ready...].filter { $0 == "WATCHDOG=1" }.count >= 5, "\(messages)")
        let stopping = try #require(messages.firstIndex { $0.hasPrefix("STOPPING=1") }, "\(messages)")
        #expect(stopping > ready)
        print("READY=1 \(listener.timed[ready].at - started) after start")
    }

    @Test func theWatchdogIsFedOnlyWhileFramesFlowAndSegmentsCloseOnTime() {
        let second: UInt64 = 1_000_000_000
        func healthy(now: UInt64, frame: UInt64, segment: UInt64, first: UInt64 = 1) -> Bool {
            ServiceHeartbeat.isHealthy(
                now: now * second, lastFrame: frame * second, lastSegment: segment * second,
                firstFrame: first * second, frameDeadline: .seconds(4), segmentDeadline: .seconds(15))
        }
        #expect(healthy(now: 100, frame: 99, segment: 96))
        #expect(!healthy(now: 100, frame: 95, segment: 96), "a stalled camera: no frame for 5 s")
        #expect(!healthy(now: 100, frame: 100, segment: 80), "frames come but no segment closed for 20 s")
        #expect(healthy(now: 10, frame: 10, segment: 0, first: 1), "before the first segment, counted from the first frame")
        #expect(!healthy(now: 20, frame: 20, segment: 0, first: 1))
        #expect(!healthy(now: 10, frame: 0, segment: 0, first: 0), "no frame yet")
    }
}
