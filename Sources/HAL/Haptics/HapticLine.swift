/// The output that drives the vibration motor: a GPIO line, or a log line on devices without one.
///
/// - Important: ``Haptics`` sets a pattern's first edge on the thread that asks for it and the
///   rest from a thread of its own, and ``release()`` may come from yet another
///   (``Haptics/close()``, `deinit`), so an implementation must be safe to call from any thread.
///   ``setActive(_:)`` is called with the player's lock held: it should be as short as one
///   `ioctl`. Once released, ``setActive(_:)`` throws and ``release()`` does nothing.
public protocol HapticLine: AnyObject, Sendable, CustomStringConvertible {
    /// Drives the line active (motor on) or inactive (motor off). Throws ``GPIOError``, or
    /// whatever the implementation fails with.
    func setActive(_ active: Bool) throws
    /// Drives the line inactive, if it can, and lets go of it. Safe to call more than once.
    func release()
}
