import HAL
import ServiceLifecycle

/// Holds the haptic line for as long as the agent's service group runs, and releases it (its
/// thread joined, the line let go) when the group stops it. The group starts it before the
/// parts that pulse the line, so it stops after them.
struct HapticsService: Service {
    let haptics: Haptics

    func run() async {
        // Cancelled or shut down gracefully: either way the line is released here.
        try? await gracefulShutdown()
        haptics.close()
    }
}
