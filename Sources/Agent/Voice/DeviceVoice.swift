import Foundation
public import HAL
public import Logging
import Synchronization

/// The device's voice: speaks guidance and status phrases through one ``Speaker``, choosing the
/// eSpeak-ng voice for each language tag with a ``VoiceMap``.
///
/// The device's one language (``deviceLocale``, from `device.locale`) speaks status phrases and any
/// guidance that carries no `lang`; the uplink's `hello` asks for guidance in it too. Which voice
/// serves which locale is logged once per locale.
public final class DeviceVoice: Sendable {
    public let deviceLocale: String
    /// Where speech goes, e.g. `alsa:default`, `wav:out/speech`, or `none`.
    public let output: String
    /// Why there is no sound output, when there is none: eSpeak-ng or the sink did not start.
    public let problem: String?
    private let speaker: Speaker?
    private let voices: VoiceMap
    private let announced = Mutex<Set<String>>([])
    private let logger: Logger

    /// `speaker` nil: there is no sound output; what would be spoken is logged instead.
    public init(deviceLocale: String, speaker: Speaker?, output: String, voices: VoiceMap, logger: Logger, problem: String? = nil) {
        self.deviceLocale = deviceLocale
        self.speaker = speaker
        self.output = speaker == nil ? "none" : output
        self.problem = speaker == nil ? problem ?? "no sound output" : nil
        self.voices = voices
        self.logger = logger
    }

    /// Speaks `text` in `locale` (the device's when nil). Returns at once. Guidance: a newer message
    /// replaces it if it is still waiting to start; `keep` (status) waits its turn instead.
    public func say(
        _ text: String, locale: String?, urgent: Bool, keep: Bool = false,
        receivedAt: ContinuousClock.Instant = .now
    ) {
        let choice = voice(for: locale ?? deviceLocale)
        guard let speaker else {
            logger.notice("speech (no sound output): \(text)", metadata: ["voice": "\(choice.voice)"])
            return
        }
        speaker.say(text: text, voice: choice.voice, urgent: urgent, keep: keep, receivedAt: receivedAt)
    }

    /// Speaks status phrases, as one utterance, in the device's language. Kept: guidance that comes
    /// while it waits goes first, but does not replace it ("Incident saved." is heard).
    public func announce(_ phrases: [StatusPhrase]) {
        guard !phrases.isEmpty else { return }
        let text = statusText(phrases)
        logger.info("status: \(text)")
        say(text, locale: deviceLocale, urgent: false, keep: true)
    }

    /// `phrases` as one text in the language of the device's voice: English when no voice speaks
    /// the device's language, so that a voice never reads words of another language.
    public func statusText(_ phrases: [StatusPhrase]) -> String {
        let language = voice(for: deviceLocale).language
        return phrases.map { $0.text(language: language) }.joined(separator: " ")
    }

    public var stats: Speaker.Stats? { speaker?.stats }
    public var recentLatencies: [Duration] { speaker?.recentLatencies ?? [] }

    public func waitUntilIdle() async { await speaker?.waitUntilIdle() }

    public func close() { speaker?.close() }

    /// The voice for `locale`, logging the choice the first time a locale is seen.
    public func voice(for locale: String) -> VoiceMap.Choice {
        let choice = voices.voice(for: locale)
        let first = announced.withLock { $0.insert(locale).inserted }
        if first {
            if choice.fellBack {
                logger.warning("speech: no eSpeak-ng voice speaks \(locale); using '\(choice.voice)'")
            } else {
                logger.info("speech: locale \(locale) is spoken by the eSpeak-ng voice '\(choice.voice)'")
            }
        }
        return choice
    }
}

extension Duration {
    /// Milliseconds with three decimals, for latency logs.
    var milliseconds: Double {
        let (seconds, attoseconds) = components
        return (Double(seconds) * 1e6 + (Double(attoseconds) / 1e12).rounded()) / 1000
    }
}

extension AgentConfig {
    /// The speaker on `speech.sink`. A sound card that cannot be opened is logged, and the agent
    /// goes on without speech (recording and the uplink matter more); nil then.
    public func makeVoice(logger: Logger) -> DeviceVoice {
        for notice in localeNotices { logger.notice("\(notice)") }
        let locale = deviceLocale()
        let synthesizer: EspeakSynthesizer
        do {
            synthesizer = try EspeakSynthesizer(logger: logger)
        } catch {
            logger.error("speech: eSpeak-ng does not start: \(error); guidance will only be logged")
            return DeviceVoice(
                deviceLocale: locale, speaker: nil, output: "none", voices: VoiceMap(available: []), logger: logger,
                problem: "eSpeak-ng does not start: \(error)")
        }
        let voices = VoiceMap(available: VoiceMap.voiceNames(identifiers: synthesizer.voiceIdentifiers()))
        var speaker: Speaker?
        var problem: String?
        let output = speech.sink == "alsa" ? "alsa:\(speech.device)" : speech.sink
        do {
            let spec = try AudioSinkSpec(parsing: output)
            speaker = try Speaker(
                synthesizer: synthesizer, sink: spec.makeSink(), logger: logger,
                options: .init { latency in
                    logger.debug("speech: first sample handed to \(spec) \(latency.milliseconds) ms after the message arrived")
                })
            logger.info("speech: speaking to \(spec)", metadata: ["locale": "\(locale)"])
        } catch {
            logger.error("speech: \(error); guidance will only be logged")
            problem = "\(output): \(error)"
        }
        return DeviceVoice(deviceLocale: locale, speaker: speaker, output: output, voices: voices, logger: logger, problem: problem)
    }
}
