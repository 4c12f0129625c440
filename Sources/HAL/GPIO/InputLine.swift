/// A digital input the agent watches: the ignition sense of a car (through an opto-isolated
/// input on a GPIO line), or a test's stand-in.
///
/// - Important: ``waitForChange(timeoutNs:)`` blocks, so an input is read from a thread of its own.
public protocol InputLine: AnyObject, Sendable, CustomStringConvertible {
    /// The level now, as a logical value: `true` is active (the configured active level).
    func isActive() throws -> Bool
    /// Waits up to `timeoutNs` for the level to change (an edge); `true` if one came. Edges that
    /// came together are reported once: read ``isActive()`` after.
    func waitForChange(timeoutNs: Int64) throws -> Bool
    /// Lets go of the line. Safe to call more than once.
    func release()
}
