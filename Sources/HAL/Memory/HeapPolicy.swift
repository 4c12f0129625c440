internal import CShims

/// How the C heap treats the recording's big buffers.
public enum HeapPolicy {
    /// Buffers of `bytes` and more get mappings of their own, given back to the kernel when freed.
    /// Left to itself glibc raises that threshold to the largest buffer freed so far (up to
    /// 32 MiB), and a segment's bytes (megabytes at 1080p, one being muxed while the last is
    /// written) then come from the heap, where freed pages stay resident.
    public static func mapBuffers(from bytes: Int) {
        _ = dashcam_set_mmap_threshold(Int32(clamping: bytes))
    }
}
