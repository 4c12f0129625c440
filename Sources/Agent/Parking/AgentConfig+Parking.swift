import ConfigSupport
public import HAL
public import Logging

extension AgentConfig {
    /// Parking mode is on when `parking.ignition.line` is set.
    public var parkingEnabled: Bool { parking.ignition.line != nil }

    /// How the capture thread watches a parked car; nil without parking mode.
    public func parkedCapture(logger: Logger) -> ParkedCapture? {
        guard parkingEnabled else { return nil }
        let watch = ParkedClipRules.Settings(
            preRollNs: UInt64(parking.preRollSeconds) * 1_000_000_000,
            afterNs: UInt64(parking.afterSeconds) * 1_000_000_000)
        return ParkedCapture(
            fps: parking.fps,
            makeSource: { makeSource(fps: parking.fps, logger: logger) },
            makeEncoder: { format, input in
                var settings = encoderSettings
                settings.format = format
                settings.keyframeInterval = format.fps * watch.clipSegmentSeconds
                return try LibavEncoder(settings: settings, inputFormat: input)
            },
            watch: watch,
            motion: MotionDetector.Settings(sensitivity: parking.sensitivity))
    }

    /// Impacts while parked, at `parking.sensitivity`.
    public var parkedImpactSettings: IncidentDetector.Settings {
        IncidentDetector.Settings(
            sensitivity: parking.sensitivity, before: .seconds(parking.preRollSeconds), after: .seconds(parking.afterSeconds))
    }

    public var parkingRules: ParkingRules.Settings {
        .init(debounceNs: UInt64(parking.ignition.debounceMs) * 1_000_000, delayNs: UInt64(parking.delaySeconds) * 1_000_000_000)
    }

    /// The ignition input `parking.ignition` names: a GPIO line, or a GPIO `value` file.
    public func openIgnition() throws -> any InputLine {
        guard let line = parking.ignition.line else {
            throw ConfigError.invalidOption("parking.ignition.line", "", "a line offset, a line name or a value file's path")
        }
        if line.hasPrefix("/") { return try ValueFileInputLine(path: line, activeLow: parking.ignition.activeLow) }
        // A negative offset was refused by `validate()` when the config was loaded.
        let selector: GPIOLine.Selector = Int(line).map { .offset($0) } ?? .name(line)
        return try GPIOInputLine(chip: parking.ignition.chip, line: selector, activeLow: parking.ignition.activeLow)
    }

    /// Parking mode's service; nil without `parking.ignition.line`.
    public func makeParkingService(
        pipeline: CapturePipeline, uplink: Uplink?, board: StatusBoard,
        announce: @escaping @Sendable (StatusPhrase) async -> Void, logger: Logger
    ) -> ParkingService? {
        guard parkingEnabled else { return nil }
        board.update { $0.parking = .init(input: parking.ignition.line ?? "", sensitivity: parking.sensitivity.rawValue) }
        return ParkingService(
            rules: parkingRules, open: { try openIgnition() }, pipeline: pipeline, uplink: uplink, board: board,
            announce: announce, logger: logger)
    }
}
