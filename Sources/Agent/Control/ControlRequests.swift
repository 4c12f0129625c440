import Foundation
import NIOPosix
import HAL
import UTC

/// Answers the requests of ``StatusSocket``: `status`, `say-status` and `protect …`.
struct ControlRequests: Sendable {
    let board: StatusBoard
    let store: RecordingStore?
    let uplink: Uplink?
    let server: String?
    let voice: DeviceVoice
    let haptics: Haptics
    var watch: RoadWatch? = nil
    var pairing: DevicePairingService? = nil
    /// What `protect` keeps goes to the owner.
    var clips: EventClips? = nil

    func answer(_ request: String) async -> String {
        switch request {
        case "status":
            return Self.json(await status())
        case "say-status":
            let phrase = spokenStatus(board.current)
            voice.announce([phrase])
            return Self.json(["said": phrase.text(language: voice.voice(for: voice.deviceLocale).language)])
        case "pair":
            guard let pairing else { return Self.json(["error": "this agent does not pair (no uplink.url, or uplink.pairing is false)"]) }
            guard let code = pairing.currentCode, pairing.repeatCode() else {
                return Self.json([
                    "error": pairing.credentials.isPaired ? "this car is already paired" : "no code yet; the server has not given one"
                ])
            }
            return Self.json(["code": code])
        case _ where request.hasPrefix("protect "):
            guard let selection = SegmentSelection(request: request) else {
                return Self.json(["error": "cannot read '\(request.prefix(64))'; expected `protect seq A B` or `protect time MS MS`"])
            }
            guard let store else { return Self.json(["error": "this agent keeps no local recording"]) }
            do {
                // The client checks too; a request line can come from anything that reaches the socket.
                try selection.check(String(request.prefix(64)))
                // Moves and fsyncs: on the blocking pool, not the cooperative one.
                let protection = try await NIOThreadPool.singleton.runIfActive { try store.protect(selection) }
                switch selection {
                case .time(let range): clips?.record(.protected(range, requestedAt: Date()))
                case .sequence:
                    if !protection.protected.isEmpty { clips?.record(.protectedFiles(protection.protected, requestedAt: Date())) }
                }
                return Self.json(protection)
            } catch {
                return Self.json(["error": "\(error)"])
            }
        default:
            return Self.json([
                "error": "unknown request '\(request.prefix(64))'; the agent answers `status`, `say-status`, `pair` and `protect`"
            ])
        }
    }

    /// The remaining usage, or why it is not known.
    private func spokenStatus(_ status: AgentStatus) -> StatusPhrase {
        guard status.usageKnown else {
            return switch status.uplink.state {
            case "off": .recordingOnly
            case "connected": .connected
            case "no token": .noToken
            case "authentication failed": .authenticationFailed
            default: .connectionLost
            }
        }
        guard let seconds = status.remainingSeconds else { return .usageUnlimited }
        return seconds <= 0 ? .usageExhausted : .usageRemaining(minutes: seconds / 60)
    }

    func status() async -> AgentStatus {
        var status = board.current
        if let counts = watch?.counts {
            status.localGuidance?.looked = counts.looked
            status.localGuidance?.skipped = counts.skipped
        }
        if let uplink {
            let (state, stats, opened, paused) = await (uplink.state, uplink.stats, uplink.sessionOpenedAt, uplink.paused)
            status.uplink.server = server
            status.uplink.sent = stats.sent
            status.uplink.acked = stats.acked
            status.uplink.dropped = stats.dropped
            status.uplink.reconnects = stats.reconnects
            status.uplink.paused = paused
            status.uplink.notSent = max(0, status.camera.segments - stats.acked)
            status.uploads = await uplink.uploads
            if let pairing {
                status.uplink.pairingCode = pairing.currentCode
                if let stored = pairing.credentials.current {
                    status.uplink.pairedDevice = stored.deviceId
                    status.uplink.pairedOwner = stored.ownerName
                }
            }
            switch state {
            case .connecting: status.uplink.state = "connecting"
            case .connected(let session):
                status.uplink.state = "connected"
                status.uplink.session = session
                status.uplink.sessionAgeSeconds = opened.map { Int((ContinuousClock.now - $0).components.seconds) }
            case .disconnected: status.uplink.state = "disconnected"
            case .authenticationFailed:
                status.uplink.state = "authentication failed"
                status.uplink.problem = "the server refused the device token (uplink.tokenFile)"
            case .noToken(let problem, _):
                status.uplink.state = "no token"
                status.uplink.problem = problem
            case .stopped: status.uplink.state = "stopped"
            case .parked: status.uplink.state = "parked"
            }
        }
        if let stats = voice.stats {
            status.speech.spoken = stats.spoken
            status.speech.cutOff = stats.cutOff
            status.speech.replaced = stats.replaced
            status.speech.failures = stats.failures
        }
        status.haptics.released = haptics.isReleased
        // A fix stops being the car's position a few seconds after it came (a receiver gone quiet).
        if let received = status.gps?.fix?.receivedAt,
            let at = Date(rfc3339: received),
            Date().timeIntervalSince(at) > GPSTrack.stale
        {
            status.gps?.fix = nil
        }
        if let store, status.recording != nil {
            let usage = store.usage()
            status.recording?.segments = usage.segments
            status.recording?.bytes = usage.bytes
            status.recording?.protectedSegments = usage.protectedSegments
            status.recording?.protectedBytes = usage.protectedBytes
        }
        return status
    }

    static func json(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(value) else { return #"{"error":"cannot encode the status"}"# }
        return String(decoding: data, as: UTF8.self)
    }
}
