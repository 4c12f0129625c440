import Foundation
public import GuidanceProtocol

/// What a model answers about one segment: the JSON object its response schema asks for.
///
/// ```json
/// {"clear": false, "priority": "urgent", "text": "보행자가 있습니다. 속도를 줄이세요.", "hazards": ["pedestrian"]}
/// ```
public struct ModelAnswer: Codable, Sendable, Equatable {
    public var clear: Bool
    public var priority: ServerMessage.Priority
    public var text: String
    public var hazards: [String]

    /// Longest text passed on to the driver's speaker; a model that rambles is cut here.
    public static let maxTextCharacters = GuidanceText.maxCharacters

    /// The answer a model gave as text (the JSON its schema asks for), checked; `nil` if it is not
    /// that object.
    public static func decode(_ text: String) -> ModelAnswer? {
        guard var answer = try? JSONDecoder().decode(ModelAnswer.self, from: Data(text.utf8)) else { return nil }
        answer.text = GuidanceText.clean(answer.text)
        answer.hazards = Array(
            answer.hazards.prefix(16).map { hazard in
                var cut = String(GuidanceText.clean(hazard).prefix(64))
                if cut.last == " " { cut.removeLast() }
                return cut
            })
        // A "warning" with nothing to say is a clear road.
        if answer.text.isEmpty { answer.clear = true }
        return answer
    }

    /// The guidance message for segment `seq` of a device whose language is `locale`.
    public func guidance(seq: Int, locale: String) -> ServerMessage.Guidance {
        .init(seq: seq, text: clear ? "" : text, lang: locale, clear: clear, priority: clear ? .normal : priority)
    }

    /// The same object as a JSON schema, in the two dialects the services take: Gemini's
    /// `responseSchema` (an OpenAPI subset, upper-case types) and OpenAI's `json_schema`.
    public static func schema(openAPI: Bool) -> [String: Any] {
        func type(_ name: String) -> String { openAPI ? name.uppercased() : name }
        var schema: [String: Any] = [
            "type": type("object"),
            "properties": [
                "clear": ["type": type("boolean"), "description": "true when nothing needs the driver's attention"] as [String: Any],
                "priority": [
                    "type": type("string"), "enum": ["normal", "urgent"],
                    "description": "urgent only for a danger that needs action within seconds"
                ] as [String: Any],
                "text": ["type": type("string"), "description": "what to say to the driver, one or two short sentences; empty when clear"]
                    as [String: Any],
                "hazards": [
                    "type": type("array"), "items": ["type": type("string")] as [String: Any],
                    "description": "the hazards seen, as short English nouns (pedestrian, cyclist, vehicle, obstacle, signal)"
                ]
                    as [String: Any]
            ] as [String: Any],
            "required": ["clear", "priority", "text", "hazards"]
        ]
        if !openAPI { schema["additionalProperties"] = false }
        return schema
    }

    /// How the car moved over the segment, from its GPS track (the header's `gps`): the speed
    /// and heading of its newest point that has them.
    public struct Motion: Sendable, Equatable {
        /// km/h.
        public var speed: Double
        /// Degrees from true north; nil when the car stands (a receiver's heading is noise then).
        public var heading: Double?

        public init(speed: Double, heading: Double?) {
            self.speed = speed
            self.heading = heading
        }

        /// Nil without a point that has a speed (no GPS, no fix).
        public init?(_ track: [GPSPosition]?) {
            guard let point = track?.last(where: { $0.mode >= 2 && $0.speed != nil }), let speed = point.speed else { return nil }
            self.speed = speed * 3.6
            heading = speed >= 1 ? point.track : nil
        }

        /// The sentence the prompt gets: numbers only, written here, never a peer's text.
        var sentence: String {
            let kmh = Int(speed.rounded())
            guard let heading else { return " The car's GPS says it is moving at \(kmh) km/h." }
            return " The car's GPS says it is moving at \(kmh) km/h, heading \(Int(heading.rounded()) % 360) degrees from north."
        }
    }

    /// The instruction sent with each segment: guidance for a driver, in the device's language,
    /// with the car's speed and heading when its GPS gave them.
    public static func prompt(locale: String, motion: Motion? = nil) -> String {
        prompt(locale: locale) + (motion?.sentence ?? "")
    }

    public static func prompt(locale: String) -> String {
        """
        You are the co-driver of a car. The attached video is the last few seconds from its \
        forward-facing dashcam. Decide whether the driver needs to know anything now: \
        pedestrians or cyclists near the path, a vehicle braking or cutting in, an obstacle, \
        a red light or stop sign ahead. If nothing needs attention, answer clear = true with \
        an empty text. Otherwise write one or two short sentences to be spoken aloud to the \
        driver, in the language with the BCP 47 tag \(locale), and set priority to urgent only \
        if the driver must act within seconds. Do not describe the scenery.
        """
    }
}

/// A model service's `endpoint` (with or without a trailing slash) followed by `path`.
func modelURL(endpoint: String, path: String) -> String {
    "\(endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint)/\(path)"
}
