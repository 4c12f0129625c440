/// Loop recording's limits, and which segments go to respect them.
///
/// - Unprotected segments are kept under `maxBytes`, the oldest capture time going first.
/// - Protected segments (an incident the driver kept) are kept under `protectedMaxBytes`, the
///   oldest going first.
/// - The disk keeps `minFreeBytes` free with the oldest unprotected segments. Protected ones go
///   (oldest first) only when no unprotected one is left and the incoming segment would not fit
///   at all: other programs filling the disk cost the loop, not the incidents.
public struct Retention: Sendable, Equatable {
    /// Nil: no cap; the free space floor alone limits the recording.
    public var maxBytes: Int64?
    public var protectedMaxBytes: Int64
    public var minFreeBytes: Int64

    /// The segments to delete, in order, before `incoming` more bytes are written (as a protected
    /// segment or not), given what is stored (oldest first) and the disk's free bytes (nil: unknown).
    public func victims(
        of stored: [StoredSegment], freeBytes: Int64?, incoming: Int64 = 0, incomingProtected: Bool = false
    ) -> [StoredSegment] {
        var loop = stored.filter { !$0.isProtected }[...]
        var kept = stored.filter(\.isProtected)[...]
        var loopBytes = loop.reduce(0) { $0 + $1.bytes } + (incomingProtected ? 0 : incoming)
        var keptBytes = kept.reduce(0) { $0 + $1.bytes } + (incomingProtected ? incoming : 0)
        var free = freeBytes.map { $0 - incoming }
        var victims: [StoredSegment] = []
        func take(_ segment: StoredSegment) {
            victims.append(segment)
            free = free.map { $0 + segment.bytes }
        }
        if let maxBytes {
            while loopBytes > maxBytes, let oldest = loop.popFirst() {
                loopBytes -= oldest.bytes
                take(oldest)
            }
        }
        while keptBytes > protectedMaxBytes, let oldest = kept.popFirst() {
            keptBytes -= oldest.bytes
            take(oldest)
        }
        while let left = free, left < minFreeBytes, let oldest = loop.popFirst() {
            take(oldest)
        }
        while let left = free, left < 0, let oldest = kept.popFirst() {
            take(oldest)
        }
        return victims
    }
}
