import Foundation

/// One active session per device: a newer connection supersedes the older one, which the server
/// closes with 4000 — only the latest view of the road matters.
actor SessionRegistry {
    struct Entry {
        let id: String
        let supersede: @Sendable () async -> Void
    }

    private var sessions: [String: Entry] = [:]
    /// Seconds of guidance left per device; `nil` is unlimited.
    private var remaining: [String: Int?] = [:]
    private let initialUsage: Int?
    /// Segments acknowledged per device, whichever session acknowledged them.
    private var acknowledged: [String: AcknowledgedSegments] = [:]

    init(initialUsage: Int?) { self.initialUsage = initialUsage }

    /// Makes `id` the device's session and supersedes the one before it, if any.
    func register(device: String, id: String, supersede: @escaping @Sendable () async -> Void) async {
        let previous = sessions.updateValue(Entry(id: id, supersede: supersede), forKey: device)
        await previous?.supersede()
    }

    func unregister(device: String, id: String) {
        if sessions[device]?.id == id { sessions[device] = nil }
    }

    func remainingSeconds(device: String) -> Int? {
        remaining[device] ?? initialUsage
    }

    /// Spends a segment's whole seconds (≥ 0); returns what is left (`nil`: unlimited).
    func spend(device: String, seconds: Int) -> Int? {
        guard let left = remaining[device] ?? initialUsage else { return nil }
        let now = max(0, left - min(left, seconds))
        remaining[device] = now
        return now
    }

    var activeDevices: [String] { sessions.keys.sorted() }

    /// Whether the device's segment `seq` of `stream` was already acknowledged with this SHA-256.
    func wasAcknowledged(device: String, stream: String, seq: Int, sha256: String) -> Bool {
        acknowledged[device]?.sha256(of: .init(stream: stream, seq: seq)) == sha256
    }

    /// Remembers that the device's segment `seq` of `stream` was acknowledged; a different SHA-256
    /// for the same segment replaces the one remembered.
    func recordAcknowledged(device: String, stream: String, seq: Int, sha256: String) {
        acknowledged[device, default: AcknowledgedSegments()].record(.init(stream: stream, seq: seq), sha256: sha256)
    }
}

/// One device's acknowledged segments, keyed by stream and seq, with their SHA-256.
///
/// Bounded: the last ``limit`` (256) recorded are kept and the oldest is forgotten first. An agent
/// re-sends only what a lost connection left unacknowledged, a few segments at most, so 256 (over
/// 20 minutes of 5 s segments) is plenty; a re-send older than that is simply analysed again.
struct AcknowledgedSegments {
    struct Key: Hashable {
        let stream: String
        let seq: Int
    }

    static let limit = 256

    private var digests: [Key: String] = [:]
    /// Keys from oldest to newest record.
    private var order: [Key] = []

    func sha256(of key: Key) -> String? { digests[key] }

    mutating func record(_ key: Key, sha256: String) {
        if digests.updateValue(sha256, forKey: key) != nil {
            // Recorded again: it is now the newest.
            order.removeAll { $0 == key }
        }
        order.append(key)
        while order.count > Self.limit {
            digests[order.removeFirst()] = nil
        }
    }

    var count: Int { digests.count }
}
