import Foundation
import HAL
import Testing

/// The ignition's input without a chip: a GPIO `value` file, and the errors a missing chip gives.
/// The GPIO character device's input (edges from gpio-sim's pull) is proven in the VM suite's
/// case 80-parking.
@Suite struct GPIOInputTests {
    static func file(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("value-\(UUID().uuidString)").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func aValueFileReadsItsLevelActiveHighOrLow() throws {
        let path = try Self.file("1\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let high = try ValueFileInputLine(path: path)
        let low = try ValueFileInputLine(path: path, activeLow: true)
        #expect(try high.isActive() && !low.isActive())
        try Data("0".utf8).write(to: URL(fileURLWithPath: path))
        #expect(try !high.isActive() && low.isActive())
        #expect(low.description == "GPIO value file \(path) active-low")
    }

    @Test func aValueFileTellsAChangeAndATimeout() async throws {
        let path = try Self.file("0\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let line = try ValueFileInputLine(path: path, intervalNs: 10_000_000)
        #expect(try !line.waitForChange(timeoutNs: 50_000_000))
        // Emptied, as a program that rewrites it leaves it for a moment: no change, no error.
        try Data().write(to: URL(fileURLWithPath: path))
        #expect(try !line.waitForChange(timeoutNs: 50_000_000))
        // The writer below empties the file too before it writes: that moment is passed over.
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: path))
        let writer = Task.detached {
            try await Task.sleep(for: .milliseconds(50))
            try Data("1\n".utf8).write(to: URL(fileURLWithPath: path))
        }
        // Long enough for any machine: it returns at the change, not at the timeout.
        #expect(try line.waitForChange(timeoutNs: 60_000_000_000))
        try await writer.value
        #expect(try line.isActive())
    }

    @Test func aValueFileThatIsMissingOrHoldsSomethingElseIsAClearError() throws {
        #expect(throws: GPIOError.self) { try ValueFileInputLine(path: "/nonexistent/gpio27/value") }
        do {
            _ = try ValueFileInputLine(path: "/nonexistent/gpio27/value")
        } catch {
            #expect(error.description == "GPIO value file /nonexistent/gpio27/value: cannot be read")
        }
        let path = try Self.file("high\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try ValueFileInputLine(path: path)
            Issue.record("a value file holding \"high\" was taken")
        } catch {
            #expect(error.description == "GPIO value file \(path): holds \"high\", not 0 or 1")
        }
    }

    @Test func anInputOnAMissingChipNamesTheChipAndTheLine() {
        do {
            _ = try GPIOInputLine(chip: "gpiochip999", line: .offset(27))
            Issue.record("a missing chip was opened")
        } catch {
            #expect(error.description.hasPrefix("GPIO chip \"gpiochip999\" (/dev/gpiochip999) line 27: no such chip"), "\(error)")
            #expect(error.isChipNotFound)
        }
        do {
            _ = try GPIOInputLine(chip: nil, line: .offset(2))
            Issue.record("an offset without a chip was taken")
        } catch {
            #expect(error.isInvalidRequest, "\(error)")
        }
    }
}

/// A frame kept past its source's next frame: the parked car's pre-roll.
@Suite struct FrameCopyTests {
    @Test func aCopyKeepsItsPictureWhenTheSourceMovesOn() throws {
        let source = TestPatternSource(format: VideoFormat(width: 320, height: 180, fps: 10), realtime: false)
        _ = try source.open()
        defer { source.close() }
        let first = try #require(try source.nextFrame())
        let original = try #require(first.luma(maxWidth: 320))
        let copy = try #require(FrameCopy(first))
        #expect(copy.bytes >= 320 * 180)
        for _ in 0..<5 { _ = try source.nextFrame() }
        let kept = copy.frame
        #expect(kept.luma(maxWidth: 320) == original)
        #expect(kept.timestamp == first.timestamp && kept.sequence == first.sequence && kept.pixelFormat == first.pixelFormat)
    }
}
