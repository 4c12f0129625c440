internal import CShims
internal import Glibc
// `timespec` can be owned by whichever C module first includes <time.h>; here that is CV4L2.
internal import CV4L2

/// The wall clock's state: day folders and `protect 09:30..` depend on it, and a board without a
/// clock battery starts with a wrong one until it is synchronised.
public enum WallClock {
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC`, in seconds: what dates a monotonic time. It moves only
    /// when the wall clock is set or slewed.
    public static func offset() -> Double {
        var real = timespec()
        clock_gettime(CLOCK_REALTIME, &real)
        let wall = Double(real.tv_sec) + Double(real.tv_nsec) / 1e9
        return wall - Double(MonotonicClock.now()) / 1e9
    }

    /// A change of ``offset()`` larger than this is a step of the clock (NTP or a GPS fix setting
    /// it), not the slewing that keeps it in time.
    public static let stepThreshold = 1.0

    /// Whether the kernel counts the clock as synchronised (NTP, `systemd-timesyncd`); `nil` when
    /// it cannot tell.
    public static var isSynchronised: Bool? {
        switch dashcam_clock_synchronised() {
        case 1: true
        case 0: false
        default: nil
        }
    }
}
