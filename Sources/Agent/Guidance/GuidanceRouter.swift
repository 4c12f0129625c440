public import GuidanceProtocol
public import HAL
public import Logging
public import RoadScene

/// One guidance message from the wire to the driver: `Uplink.messages → route → speaker / motor`.
///
/// - clear road: the `clear` pattern on the vibration motor, nothing spoken;
/// - urgent guidance: the `alert` pattern, and the text cuts off whatever is being spoken;
/// - normal guidance: spoken after the current utterance, replacing one still waiting;
/// - usage (welcome, usage, quota exhausted) and `guidance_unavailable`: to the announcer, which
///   speaks what changed, once.
///
/// Local guidance (``LocalGuidance``) speaks its findings through ``local(_:)`` with the same rules.
///
/// Neither the speaker nor the motor is waited for: speech plays on its own thread, and the motor
/// sets its first edge here (one ioctl) and leaves the rest of the pattern to its own thread.
public struct GuidanceRouter: Sendable {
    public let voice: DeviceVoice
    public let haptics: Haptics
    /// `haptics.clear` and `haptics.alert`, which SIGHUP may change.
    public let patterns: Reloadable<(clear: HapticPattern, alert: HapticPattern)>
    public let announcer: StatusAnnouncer
    public let board: StatusBoard
    public let logger: Logger

    public init(
        voice: DeviceVoice, haptics: Haptics, clear: HapticPattern, alert: HapticPattern,
        announcer: StatusAnnouncer, board: StatusBoard, logger: Logger
    ) {
        self.voice = voice
        self.haptics = haptics
        self.patterns = Reloadable((clear, alert))
        self.announcer = announcer
        self.board = board
        self.logger = logger
    }

    public func route(_ message: ServerMessage, receivedAt: ContinuousClock.Instant = .now) async {
        board.received(message)
        switch message {
        case .guidance(let guidance) where guidance.clear:
            await announcer.guidanceArrived()
            haptics.play(patterns.current.clear, receivedAt: receivedAt)
            logger.notice("guidance: segment \(guidance.seq): clear")
        case .guidance(var guidance):
            // The server cleans and caps it too; the agent does not rely on that.
            guidance.text = GuidanceText.clean(guidance.text)
            await announcer.guidanceArrived()
            let urgent = guidance.priority == .urgent
            if urgent { haptics.play(patterns.current.alert, receivedAt: receivedAt) }
            voice.say(guidance.text, locale: guidance.lang, urgent: urgent, receivedAt: receivedAt)
            logger.notice(
                "guidance: segment \(guidance.seq): \(guidance.text)",
                metadata: [
                    "lang": "\(guidance.lang ?? voice.deviceLocale)", "priority": "\(guidance.priority.rawValue)"
                ])
        case .welcome(_, let remaining):
            await announcer.usage(remainingSeconds: remaining, fromWelcome: true)
        case .usage(let remaining):
            logger.info("usage: \(remaining) s of guidance left")
            await announcer.usage(remainingSeconds: remaining, fromWelcome: false)
        case .error(.quotaExhausted, _, _):
            await announcer.usageExhausted()
        case .error(.guidanceUnavailable, let message, _):
            logger.warning("server: guidance unavailable: \(message)")
            await announcer.guidanceUnavailable()
        default:
            logger.debug("server: \(message)")
        }
    }

    /// A finding of the device's own checks, in the device's language (English when no voice
    /// speaks it): urgent with the `alert` pattern and cutting off speech, like server guidance.
    /// `phrases` are said first, in the same utterance.
    public func local(_ finding: RoadFinding, after phrases: [StatusPhrase] = [], receivedAt: ContinuousClock.Instant = .now) {
        let choice = voice.voice(for: voice.deviceLocale)
        let (text, lang) = finding.text(locale: choice.fellBack ? "en" : voice.deviceLocale)
        if finding.urgent { haptics.play(patterns.current.alert, receivedAt: receivedAt) }
        let intro = phrases.isEmpty ? "" : voice.statusText(phrases)
        if !intro.isEmpty { logger.info("status: \(intro)") }
        voice.say(intro.isEmpty ? text : intro + " " + text, locale: lang, urgent: finding.urgent, receivedAt: receivedAt)
        board.update { $0.localGuidance?.spoken += 1 }
        logger.notice("guidance (local): \(finding.rawValue): \(text)", metadata: ["lang": "\(lang)"])
    }
}
