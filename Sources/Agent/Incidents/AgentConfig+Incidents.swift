public import HAL
public import Logging

extension AgentConfig {
    /// The G-sensor's service; nil with no `sensors.accel.device` or with `incident.sensitivity: off`.
    public func makeIncidentService(
        store: RecordingStore, uplink: Uplink?, board: StatusBoard, motor: Haptics,
        announce: @escaping @Sendable (StatusPhrase) async -> Void, logger: Logger
    ) throws -> IncidentService? {
        guard let device = sensors.accel.device else { return nil }
        guard incident.sensitivity != .off else {
            logger.info("g-sensor: \(device) not read: incident.sensitivity is off")
            return nil
        }
        let pattern = try HapticPattern(haptics.incident, name: "incident")
        let hz = sensors.accel.hz
        return IncidentService(
            settings: .init(detector: incidentDetectorSettings, hz: hz, segmentSeconds: encoder.segmentSeconds),
            open: { () throws(AccelerometerError) -> any Accelerometer in try IIOAccelerometer(device: device, hz: hz) },
            store: store, uplink: uplink, board: board, announce: announce, vibrate: { motor.play(pattern) }, logger: logger)
    }

    public var incidentDetectorSettings: IncidentDetector.Settings {
        IncidentDetector.Settings(
            sensitivity: incident.sensitivity, before: .seconds(incident.beforeSeconds), after: .seconds(incident.afterSeconds))
    }
}
