public import HAL
public import Logging

extension AgentConfig {
    /// gpsd's client and the track it fills; nil without `sensors.gps.gpsd`.
    public func makeGPS(logger: Logger) -> (receiver: any GPSReceiver, track: GPSTrackStore)? {
        guard let text = sensors.gps.gpsd, let address = GpsdClient.address(text) else { return nil }
        return (GpsdClient(host: address.host, port: address.port), GPSTrackStore())
    }
}
