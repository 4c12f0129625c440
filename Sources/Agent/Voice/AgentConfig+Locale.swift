import ConfigSupport
public import Foundation

/// The device's one language: `device.locale` decides the `hello` locale (so the server's
/// guidance), the voice of guidance without `lang`, and the status phrases.
extension AgentConfig {
    /// The keys that used to hold the language, read as old names of `device.locale`.
    var deprecatedLocaleKeys: [(key: String, value: String?)] {
        [("uplink.locale", uplink.locale), ("speech.locale", speech.locale)]
    }

    /// `device.locale`, else the first old name set, in its conventional case (`ko-KR`); nil
    /// when none is set.
    public var configuredLocale: String? {
        guard let value = device.locale ?? deprecatedLocaleKeys.lazy.compactMap(\.value).first else { return nil }
        return LanguageTag(value)?.description ?? value
    }

    /// The device's language: ``configuredLocale``, else the process locale (`LC_ALL`,
    /// `LC_MESSAGES`, `LANG`, the first one set and not empty), else `en-US`. `C` and `POSIX`
    /// count as no language. (`DASHCAM_DEVICE_LOCALE` sets `device.locale` itself when loading.)
    public func deviceLocale(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let configuredLocale { return configuredLocale }
        for name in ["LC_ALL", "LC_MESSAGES", "LANG"] {
            guard let value = environment[name], !value.isEmpty else { continue }
            // The first one set decides, as for setlocale(3); `C` means no language.
            return VoiceMap.languageTag(fromPOSIXLocale: value) ?? "en-US"
        }
        return "en-US"
    }

    /// One line for the log per old locale key in use.
    public var localeNotices: [String] {
        deprecatedLocaleKeys.compactMap { key, value in
            value.map { "config: \(key) is deprecated; use device.locale: \($0) (it sets the device's one language)" }
        }
    }

    /// Every locale key holds a well-formed tag, and the old names, when set, agree with
    /// `device.locale` and each other: two languages for one device is the mistake this prevents.
    func validateLocale() throws(ConfigError) {
        let given = [("device.locale", device.locale)] + deprecatedLocaleKeys.map { ($0.key, $0.value) }
        var first: (key: String, tag: LanguageTag)?
        for case let (key, value?) in given {
            guard let tag = LanguageTag(value) else {
                throw .invalidOption(key, value, LanguageTag.expected)
            }
            if let first, first.tag != tag {
                throw .invalidOption(
                    key, value,
                    "unset or \(first.tag), as \(first.key) says: \(key) is an old name of device.locale, and a device has one language")
            }
            if first == nil { first = (key, tag) }
        }
    }
}
