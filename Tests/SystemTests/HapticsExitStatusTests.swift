@testable import Agent
import Foundation
@testable import HAL
import TestSupport
import Testing

/// Which status each vibration-motor failure exits with: the real errors where this machine can
/// make them (no chip, a path that is no chip, a line that names nothing), the rest (a busy
/// line, a chip this user may not open) as the lookup words them.
@Suite struct HapticsExitStatusTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let agent = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("dashcam-agent").path

    /// The agent with the demo config and `environment` set; status and stderr.
    func record(_ environment: [String: String]) async throws -> (status: Int32, stderr: String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haptics-exit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let result = try await Command.executeAsync(
            Self.agent,
            [
                "record", "--config", Self.repo.appendingPathComponent("device-config/demo.yaml").path, "--out", folder.path,
                "--source", "test-pattern", "--segments", "1"
            ],
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
        return (result.status, result.stderr)
    }

    @Test func aMissingChipOrLineExits66() throws {
        let chip = #expect(throws: GPIOError.self) { try GPIOLine(chip: "gpiochip999", line: .offset(0)) }
        let line = #expect(throws: GPIOError.self) { try GPIOLine(chip: nil, line: .name("dashcam-no-such-line")) }
        #expect(try ExitStatus.status(of: #require(chip)) == 66)
        #expect(try ExitStatus.status(of: #require(line)) == 66)
    }

    @Test func aPathThatIsNoGPIOChipExits69WithTheReason() async throws {
        let run = try await record(["DASHCAM_HAPTICS_CHIP": "/dev/null", "DASHCAM_HAPTICS_LINE": "0"])
        #expect(run.status == 69)
        #expect(run.stderr.contains(#"GPIO chip "/dev/null" line 0: not a GPIO chip"#), "\(run.stderr)")
    }

    @Test func aLineOffsetWithoutAChipIsARequestForNothingAndExits78() throws {
        let error = #expect(throws: GPIOError.self) { try GPIOLine(chip: nil, line: .offset(5)) }
        #expect(try ExitStatus.status(of: #require(error)) == 78)
    }

    @Test func aNegativeLineOffsetIsAConfigErrorEvenWhenTheMotorIsOptional() async throws {
        let run = try await record([
            "DASHCAM_HAPTICS_CHIP": "gpiochip0", "DASHCAM_HAPTICS_LINE": "-3",
            "DASHCAM_HAPTICS_REQUIRED": "false"
        ])
        #expect(run.status == 78)
        #expect(run.stderr.contains("haptics.line: '-3' is not allowed; expected a line offset, 0 or more"), "\(run.stderr)")
    }

    @Test func aBusyLineExits75AndAChipThisUserMayNotOpenExits77() {
        let busy = GPIOError.lineBusy(
            #"GPIO chip gpiochip0 line 5: line busy, used by consumer "gpioset""#,
            holder: "gpioset", code: EBUSY)
        let denied = GPIOError.permissionDenied(
            "GPIO chip \"gpiochip0\" (/dev/gpiochip0) line 5: permission denied",
            code: EACCES)
        #expect(busy.holder == "gpioset")
        #expect(ExitStatus.status(of: busy) == ExitStatus.busy && ExitStatus.busy == 75)
        #expect(ExitStatus.status(of: denied) == ExitStatus.noPermission && ExitStatus.noPermission == 77)
    }

    @Test func aLineThatFailsAfterItWasRequestedIsAnIOErrorNotACameraError() {
        let set = GPIOError.set("GPIO chip gpiochip0 line 5: cannot set the line active (Input/output error)", code: EIO)
        #expect(ExitStatus.status(of: set) == 74)
        #expect(ExitStatus.status(of: .thread(EAGAIN)) == 74)
    }
}
