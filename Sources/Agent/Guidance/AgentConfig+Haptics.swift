import ConfigSupport
public import HAL
public import Logging

extension AgentConfig {
    /// The vibration motor on `haptics.chip`/`haptics.line`, or the log when no chip is set.
    ///
    /// A missing chip, a missing line or a line held by another program throws ``GPIOError``
    /// naming chip and line; with `haptics.required: false` it is a warning and the pulses are
    /// logged. A negative `haptics.line` is a ``ConfigError`` either way.
    public func makeHaptics(logger: Logger) throws -> Haptics {
        try Haptics(line: hapticLine(logger: logger), logger: logger) { latency, pattern in
            logger.debug("haptics: \(pattern.name) line set \(latency.milliseconds) ms after the message arrived")
        }
    }

    private func hapticLine(logger: Logger) throws -> any HapticLine {
        guard let chip = haptics.chip else {
            logger.info("haptics: no haptics.chip set; the pulses are logged")
            return LoggingHapticLine(logger: logger)
        }
        let selector = try hapticSelector()
        let line: GPIOLine
        do {
            line = try GPIOLine(chip: chip, line: selector, activeLow: haptics.activeLow)
        } catch {
            guard !haptics.required else { throw error }
            logger.warning("haptics: \(error); haptics.required is false, so the pulses are only logged")
            return LoggingHapticLine(logger: logger)
        }
        logger.info("haptics: \(line)", metadata: ["gpiod": "\(GPIOLine.libraryVersion)"])
        return line
    }

    /// `haptics.line` as an offset or a name (the key table has made sure it is not empty).
    private func hapticSelector() throws(ConfigError) -> GPIOLine.Selector {
        guard let offset = Int(haptics.line) else { return .name(haptics.line) }
        guard offset >= 0 else {
            throw .invalidOption("haptics.line", haptics.line, "a line offset, 0 or more, or a line name such as `haptic`")
        }
        return .offset(offset)
    }

    /// `haptics.clear` and `haptics.alert`; the key table has checked their lengths and times.
    public func hapticPatterns() throws -> (clear: HapticPattern, alert: HapticPattern) {
        (try HapticPattern(haptics.clear, name: "clear"), try HapticPattern(haptics.alert, name: "alert"))
    }
}
