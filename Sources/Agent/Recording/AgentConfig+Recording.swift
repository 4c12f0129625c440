extension AgentConfig {
    /// `recording.*` limits in bytes.
    public var retention: Retention {
        Retention(
            maxBytes: recording.maxMegabytes.map { Int64($0) << 20 },
            protectedMaxBytes: Int64(recording.protectedMaxMegabytes) << 20,
            minFreeBytes: Int64(recording.minFreeMegabytes) << 20)
    }
}
