/// How many requests one address may make in a window (a fixed window per address), with a cap
/// on how many addresses are remembered: a peer that sends from many addresses cannot grow the
/// table past `maxAddresses` (the oldest windows are dropped first). Pure: time is passed in.
struct RequestBudget: Sendable {
    let perWindow: Int
    let windowMs: Int64
    let maxAddresses: Int
    private var windows: [String: (start: Int64, count: Int)] = [:]

    /// A car asks for a code about once in 10 minutes; ten leave room for restarts and a household.
    init(perWindow: Int = 10, windowMs: Int64 = 600_000, maxAddresses: Int = 10_000) {
        self.perWindow = perWindow
        self.windowMs = windowMs
        self.maxAddresses = maxAddresses
    }

    var remembered: Int { windows.count }

    /// Counts one request from `address`; `false` when its window is used up.
    mutating func allow(_ address: String, nowMs: Int64) -> Bool {
        if var window = windows[address], nowMs - window.start < windowMs, nowMs >= window.start {
            guard window.count < perWindow else { return false }
            window.count += 1
            windows[address] = window
            return true
        }
        if windows[address] == nil, windows.count >= maxAddresses {
            windows = windows.filter { nowMs - $0.value.start < windowMs && nowMs >= $0.value.start }
            if windows.count >= maxAddresses, let oldest = windows.min(by: { $0.value.start < $1.value.start })?.key {
                windows[oldest] = nil
            }
        }
        windows[address] = (nowMs, 1)
        return true
    }
}
