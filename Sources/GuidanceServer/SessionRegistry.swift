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

    /// Spends a segment's duration; returns what is left (`nil`: unlimited).
    func spend(device: String, milliseconds: Int) -> Int? {
        guard let left = remaining[device] ?? initialUsage else { return nil }
        let now = max(0, left - (milliseconds + 999) / 1000)
        remaining[device] = now
        return now
    }

    var activeDevices: [String] { sessions.keys.sorted() }
}
