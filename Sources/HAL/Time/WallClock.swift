internal import CShims
internal import Glibc

/// The wall clock's state: day folders and `protect 09:30..` depend on it, and a board without a
/// clock battery starts with a wrong one until it is synchronised.
public enum WallClock {
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
