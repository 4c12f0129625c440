internal import CALSA
internal import Glibc

/// Playback on an ALSA PCM device, S16_LE mono, at the synthesizer's rate (resampled by ALSA's
/// plug layer when the device cannot take it).
///
/// The device buffer is kept short (``bufferTime``, in periods of a quarter of it) and playback
/// starts as soon as one period is written, so ``stop()`` cuts off at most that much buffered
/// audio and the first sample is heard a period after it is written. An underrun (the writer was
/// late) is repaired with `snd_pcm_recover` and counted; a device that fails for good is closed,
/// and the next ``begin(voice:)`` opens it again.
public final class ALSASink: AudioSink {
    /// The PCM name given to `snd_pcm_open`.
    public let device: String
    /// How much audio the device may hold ahead of what is heard.
    public let bufferTime: Duration
    /// Underruns repaired since the sink was made.
    public private(set) var underruns = 0
    private var pcm: OpaquePointer?
    private var sampleRate = 0

    public init(device: String = AudioSinkSpec.defaultALSADevice, bufferTime: Duration = .milliseconds(100)) {
        self.device = device
        self.bufferTime = bufferTime
    }

    deinit { close() }

    public var name: String { "alsa:\(device)" }

    public func open(sampleRate: Int) throws {
        close()
        self.sampleRate = sampleRate
        try openDevice()
    }

    public func begin(voice: String) throws {
        if pcm == nil { try openDevice() }
        guard let pcm else { return }
        let status = snd_pcm_prepare(pcm)
        guard status < 0 else { return }
        // A device that cannot even be prepared is opened afresh once.
        close()
        try openDevice()
        let again = snd_pcm_prepare(self.pcm)
        guard again >= 0 else { throw fail(.playback(device: device, "snd_pcm_prepare: \(Self.text(again))")) }
    }

    public func write(_ samples: ArraySlice<Int16>) throws {
        guard let pcm else { throw AudioSinkError.playback(device: device, "the device is not open") }
        try samples.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            var offset = 0
            while offset < buffer.count {
                let written = snd_pcm_writei(pcm, base + offset, snd_pcm_uframes_t(buffer.count - offset))
                if written >= 0 {
                    offset += written
                    continue
                }
                let code = Int32(written)
                if code == -EAGAIN {
                    _ = snd_pcm_wait(pcm, 100)
                    continue
                }
                // -EPIPE: underrun; -ESTRPIPE: the system was suspended. Both are repaired in place.
                let recovered = snd_pcm_recover(pcm, code, 1)
                guard recovered >= 0 else {
                    throw fail(.playback(device: device, "snd_pcm_writei: \(Self.text(code))"))
                }
                if code == -EPIPE { underruns += 1 }
            }
        }
    }

    public func drain() throws {
        guard let pcm else { return }
        if playOut(pcm) {
            // Everything written was heard and the stream ran dry: its end, not a fault.
            _ = snd_pcm_drop(pcm)
            return
        }
        let status = snd_pcm_drain(pcm)
        guard status >= 0 else { throw fail(.playback(device: device, "snd_pcm_drain: \(Self.text(status))")) }
    }

    /// Waits while the device plays what is written, so that little or nothing is left for
    /// `snd_pcm_drain`: the kernel's drain gives up (EIO, and the rest of the utterance is lost)
    /// when no period passes within 1.1 buffer times, 110 ms here (Linux 6.4, and the stable
    /// kernels that took the change), which a machine busy enough to run its timers late exceeds.
    /// Here the device may stand still for ``stallLimit`` before the drain decides. True once the
    /// stream ran dry: everything played.
    private func playOut(_ pcm: OpaquePointer) -> Bool {
        var left = snd_pcm_sframes_t.max
        var stalledSince: ContinuousClock.Instant?
        while snd_pcm_state(pcm) == SND_PCM_STATE_RUNNING {
            var delay: snd_pcm_sframes_t = 0
            guard snd_pcm_delay(pcm, &delay) >= 0, delay > 0 else { break }
            if delay < left {
                left = delay
                stalledSince = nil
            } else if let since = stalledSince {
                if since.duration(to: .now) > Self.stallLimit { return false }
            } else {
                stalledSince = .now
            }
            // What is left, in steps of at most 20 ms: the end is heard within one.
            let microseconds = Int(delay) * 1_000_000 / max(sampleRate, 1)
            usleep(UInt32(min(max(microseconds, 1000), 20_000)))
        }
        return snd_pcm_state(pcm) == SND_PCM_STATE_XRUN
    }

    /// How long the device may play nothing before ``drain()`` leaves it to `snd_pcm_drain`.
    static let stallLimit = Duration.seconds(2)

    public func stop() {
        guard let pcm else { return }
        _ = snd_pcm_drop(pcm)
    }

    public func close() {
        guard let pcm else { return }
        _ = snd_pcm_close(pcm)
        self.pcm = nil
    }

    private func openDevice() throws {
        var handle: OpaquePointer?
        let status = snd_pcm_open(&handle, device, SND_PCM_STREAM_PLAYBACK, 0)
        guard status >= 0, let handle else {
            let detail = Self.text(status)
            switch -status {
            case ENOENT, ENODEV, ENXIO: throw AudioSinkError.notFound(device: device, detail)
            case EBUSY, EAGAIN: throw AudioSinkError.busy(device: device, detail)
            default: throw AudioSinkError.cannotOpen(device: device, detail)
            }
        }
        pcm = handle
        let latency = UInt32(
            clamping: bufferTime.components.seconds * 1_000_000
                + bufferTime.components.attoseconds / 1_000_000_000_000)
        let set = snd_pcm_set_params(
            handle, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED, 1,
            UInt32(sampleRate), 1, latency)
        guard set >= 0 else {
            throw fail(.unsupported(device: device, "\(sampleRate) Hz: \(Self.text(set))"))
        }
        try startEarly(handle)
    }

    /// `snd_pcm_set_params` starts playback only once the whole buffer is full; one period is enough.
    /// And the played part of the buffer is silenced (see ``playOut(_:)``).
    private func startEarly(_ handle: OpaquePointer) throws {
        var bufferSize: snd_pcm_uframes_t = 0
        var periodSize: snd_pcm_uframes_t = 0
        var sw: OpaquePointer?
        guard snd_pcm_get_params(handle, &bufferSize, &periodSize) >= 0, periodSize > 0,
            snd_pcm_sw_params_malloc(&sw) >= 0, let sw
        else { return }
        defer { snd_pcm_sw_params_free(sw) }
        var status = snd_pcm_sw_params_current(handle, sw)
        if status >= 0 { status = snd_pcm_sw_params_set_start_threshold(handle, sw, periodSize) }
        guard status >= 0 else { throw fail(.unsupported(device: device, "software parameters: \(Self.text(status))")) }
        // What has been played is overwritten with silence (a size of the boundary: all of it), so
        // a stream that runs dry at an utterance's end plays silence, never old samples again. A
        // device that refuses it plays without.
        var boundary: snd_pcm_uframes_t = 0
        let silenced =
            snd_pcm_sw_params_get_boundary(sw, &boundary) >= 0
            && snd_pcm_sw_params_set_silence_threshold(handle, sw, 0) >= 0
            && snd_pcm_sw_params_set_silence_size(handle, sw, boundary) >= 0
        status = snd_pcm_sw_params(handle, sw)
        if status < 0, silenced {
            _ = snd_pcm_sw_params_set_silence_size(handle, sw, 0)
            status = snd_pcm_sw_params(handle, sw)
        }
        guard status >= 0 else { throw fail(.unsupported(device: device, "software parameters: \(Self.text(status))")) }
    }

    /// Closes the device, which the next ``begin(voice:)`` opens again, and returns `error`.
    private func fail(_ error: AudioSinkError) -> AudioSinkError {
        close()
        return error
    }

    private static func text(_ status: some BinaryInteger) -> String {
        "\(String(cString: snd_strerror(Int32(status))))"
    }
}
