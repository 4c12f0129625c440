import ServiceLifecycle

/// Holds the voice (its speaker thread and audio device) for as long as the agent's service
/// group runs, and closes it when the group stops it, after the parts that speak.
struct VoiceService: Service {
    let voice: DeviceVoice

    func run() async {
        try? await gracefulShutdown()
        voice.close()
    }
}
