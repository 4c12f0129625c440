/// What a clip shows that the driver should hear about, from ``SceneCheck`` and
/// ``PeopleDetector``, and what to say about it in the driver's language.
public enum RoadFinding: String, Sendable, Equatable, CaseIterable {
    /// Someone in view.
    case pedestrian
    /// Someone in view and close: the box is a large part of the picture's height.
    case pedestrianClose = "pedestrian_close"
    case tooDark = "too_dark"
    case lensCovered = "lens_covered"
    case frozen

    public init(_ scene: SceneCheck.Finding) {
        self =
            switch scene {
            case .tooDark: .tooDark
            case .lensCovered: .lensCovered
            case .frozen: .frozen
            }
    }

    /// Only a person close ahead needs the driver now.
    public var urgent: Bool { self == .pedestrianClose }

    /// The languages with their own texts, as BCP 47 primary subtags: the same eight as the
    /// agent's spoken status. Any other language gets English.
    public static let languages = ["en", "ko", "ja", "zh", "de", "es", "fr", "pt"]

    /// The text for a device whose language is `locale` (a BCP 47 tag), and the language it is
    /// in: the locale itself when its language has texts, else `en`.
    ///
    /// Japanese is in kana and Chinese in simplified characters, for eSpeak-ng's voices (see the
    /// agent's `StatusPhrase`).
    public func text(locale: String) -> (text: String, lang: String) {
        let primary = locale.split(whereSeparator: { $0 == "-" || $0 == "_" }).first.map { $0.lowercased() } ?? ""
        guard let texts = Self.texts[primary] else { return (Self.texts["en"]![self]!, "en") }
        return (texts[self]!, locale)
    }

    static let texts: [String: [RoadFinding: String]] = [
        "en": [
            .pedestrian: "Pedestrian ahead.",
            .pedestrianClose: "Pedestrian close ahead. Slow down.",
            .tooDark: "The camera view is too dark.",
            .lensCovered: "The camera lens looks covered.",
            .frozen: "The camera picture is frozen."
        ],
        "ko": [
            .pedestrian: "전방에 보행자가 있습니다.",
            .pedestrianClose: "가까이에 보행자가 있습니다. 속도를 줄이세요.",
            .tooDark: "카메라 화면이 너무 어둡습니다.",
            .lensCovered: "카메라 렌즈가 가려진 것 같습니다.",
            .frozen: "카메라 화면이 멈춰 있습니다."
        ],
        "ja": [
            .pedestrian: "ぜんぽうに ほこうしゃが います。",
            .pedestrianClose: "ちかくに ほこうしゃが います。スピードを おとして ください。",
            .tooDark: "カメラの がぞうが くらすぎます。",
            .lensCovered: "カメラの レンズが ふさがれて いるようです。",
            .frozen: "カメラの がぞうが とまって います。"
        ],
        "zh": [
            .pedestrian: "前方有行人。",
            .pedestrianClose: "前方近处有行人，请减速。",
            .tooDark: "摄像头画面太暗。",
            .lensCovered: "摄像头镜头似乎被遮挡。",
            .frozen: "摄像头画面卡住了。"
        ],
        "de": [
            .pedestrian: "Fußgänger voraus.",
            .pedestrianClose: "Fußgänger direkt voraus. Langsamer fahren.",
            .tooDark: "Das Kamerabild ist zu dunkel.",
            .lensCovered: "Das Kameraobjektiv scheint verdeckt.",
            .frozen: "Das Kamerabild steht still."
        ],
        "es": [
            .pedestrian: "Peatón delante.",
            .pedestrianClose: "Peatón muy cerca. Reduzca la velocidad.",
            .tooDark: "La imagen de la cámara está demasiado oscura.",
            .lensCovered: "La lente de la cámara parece tapada.",
            .frozen: "La imagen de la cámara está congelada."
        ],
        "fr": [
            .pedestrian: "Piéton devant.",
            .pedestrianClose: "Piéton tout près. Ralentissez.",
            .tooDark: "L'image de la caméra est trop sombre.",
            .lensCovered: "L'objectif de la caméra semble masqué.",
            .frozen: "L'image de la caméra est figée."
        ],
        "pt": [
            .pedestrian: "Pedestre à frente.",
            .pedestrianClose: "Pedestre muito perto. Reduza a velocidade.",
            .tooDark: "A imagem da câmera está escura demais.",
            .lensCovered: "A lente da câmera parece coberta.",
            .frozen: "A imagem da câmera está congelada."
        ]
    ]
}

/// Looks at a few frames of a clip: first whether the picture is usable at all, then for people.
public struct RoadLook: Sendable {
    public var scene = SceneCheck()
    /// Least HOG confidence (the SVM's margin) that counts as a person. A picture scaled up to
    /// ``searchHeight`` shows HOG patterns a sharp one does not (1 % of test-pattern frames
    /// scored 1.5, 8 % scored 1.0); people in view score 1.5 in 94 % of frames.
    public var minWeight = 1.5
    /// A search whose surest shape scores at least this but under ``minWeight`` may have missed
    /// someone who is there (people in view score under 1.5 in 6 % of frames): the agent looks
    /// again as soon as its CPU share allows, rather than at the next look's time.
    public var maybeWeight = 1.0
    /// Every picture is searched at this many rows, whatever the camera's size: HOG's window is
    /// 128 rows, so a 360-row picture searched as it is finds only people taller than a third of
    /// it, and a 720-row one costs three times the search. At 576 rows a person is found from
    /// 22 % of the picture's height, at every camera size, for the same CPU. (See BENCHMARKS.md,
    /// "People at every camera size".)
    public var searchHeight = 576
    /// The search's pyramid levels are this much smaller than the one before. HOG's own default,
    /// 1.05, searches twice as many levels for no more segments found on the footage measured,
    /// and more false alarms on a test pattern.
    public var scaleStep = 1.1
    /// A person whose box is at least this part of the picture's height, and reaches down into
    /// its bottom part (``closeBottom``: feet near the car, not a tall shape up by the horizon),
    /// is close.
    public var closeHeight = 0.4
    public var closeBottom = 0.8

    public init() {}

    public struct Result: Sendable, Equatable {
        /// The finding the driver should hear about, if any.
        public var finding: RoadFinding?
        /// People found in each frame looked at, in order.
        public var peoplePerFrame: [Int]
    }

    /// Blocks for the detector's time (tens to hundreds of milliseconds a frame).
    public func look(at frames: [GrayFrame], detector: PeopleDetector) throws -> Result {
        if let problem = scene.finding(in: frames) { return Result(finding: RoadFinding(problem), peoplePerFrame: []) }
        var counts: [Int] = []
        var close = false
        for frame in frames {
            let found = try people(in: frame, detector: detector)
            counts.append(found.count)
            close = close || found.close
        }
        let finding: RoadFinding? = close ? .pedestrianClose : counts.contains(where: { $0 > 0 }) ? .pedestrian : nil
        return Result(finding: finding, peoplePerFrame: counts)
    }

    /// How many people `frame` shows, whether one of them is close, and whether a shape that is
    /// not sure enough (``maybeWeight``) was seen. Blocks like ``look(at:detector:)``.
    public func people(in frame: GrayFrame, detector: PeopleDetector) throws -> (count: Int, close: Bool, maybe: Bool) {
        let shapes = try detector.people(
            in: frame, minWeight: min(minWeight, maybeWeight), searchHeight: searchHeight, scaleStep: scaleStep)
        let people = shapes.filter { $0.weight >= minWeight }
        let height = Double(frame.height)
        let close = people.contains { Double($0.height) >= closeHeight * height && Double($0.y + $0.height) >= closeBottom * height }
        return (people.count, close, people.count < shapes.count)
    }
}
