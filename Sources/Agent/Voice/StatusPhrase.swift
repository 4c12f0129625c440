/// What the agent says about itself, in the language of the device.
///
/// The texts are written for eSpeak-ng voices, not for a screen:
/// - Japanese is in kana only, numbers included: the `ja` voice reads every kanji as
///   "Chinese letter" and reads a digit followed by ふん without the sound changes of the counter
///   (43ふん comes out as "yonjūsan fun", not "yonjūsan pun").
/// - Chinese is in simplified characters, for the `cmn-latn-pinyin` voice (see `VoiceMap`).
/// - German, Spanish, French and Portuguese write "one minute" as a word, because the voices read
///   the digit 1 as the bare numeral ("eins Minute", "uno minuto", "un minute").
/// - Korean keeps digits: the `ko` voice reads them as Sino-Korean numbers, as 분 needs.
public enum StatusPhrase: Sendable, Hashable {
    /// The agent started with camera and encoder running.
    case ready
    /// A session with the guidance server is open.
    case connected
    /// No server connection for 10 s.
    case connectionLost
    case cameraLost
    case cameraBack
    /// The server refused the device token.
    case authenticationFailed
    /// Under 10 minutes of guidance left.
    case usageLow(minutes: Int)
    case usageExhausted
    /// At start or on request.
    case usageRemaining(minutes: Int)
    /// The server reports no limit.
    case usageUnlimited
    /// The server's model service is down: segments are still delivered, but no guidance comes.
    case guidanceUnavailable
    /// No server guidance for a while (no session, or usage exhausted): the device checks the
    /// road itself (``LocalGuidance.StateMachine``).
    case guidanceLocal
    /// The server guides again after ``guidanceLocal``.
    case guidanceFromServer
    /// The uplink has no usable token file: recording goes on, the server is not asked.
    case noToken
    /// No `uplink.url`: the device records (and checks the road itself), with no server (`say-status`).
    case recordingOnly
    /// Pairing: the nine-digit code to type on the owner's page, said in groups of three, twice.
    case pairingCode(String)
    /// Pairing done: the account's display name, so a wrong account is noticed.
    case paired(owner: String)
    /// The G-sensor's incident is over and its segments are protected.
    case incidentSaved
    /// Driving again after parking: how many clips were saved while parked.
    case parkingEvents(Int)

    /// The languages with their own texts, as BCP 47 primary subtags; any other language gets English.
    public static let languages = ["en", "ko", "ja", "zh", "de", "es", "fr", "pt"]

    /// Every case once, those with a count carrying `minutes`, the pairing ones a sample code and
    /// owner (an enum with associated values cannot be `CaseIterable`).
    public static func allCases(minutes: Int, code: String = "012345678", owner: String = "Ana") -> [StatusPhrase] {
        [
            .ready, .connected, .connectionLost, .cameraLost, .cameraBack, .authenticationFailed,
            .usageLow(minutes: minutes), .usageExhausted, .usageRemaining(minutes: minutes), .usageUnlimited,
            .guidanceUnavailable, .guidanceLocal, .guidanceFromServer, .noToken, .recordingOnly,
            .pairingCode(code), .paired(owner: owner), .incidentSaved, .parkingEvents(minutes)
        ]
    }

    /// The text in `language`, a BCP 47 primary subtag such as `ko`. A longer tag (`ko-KR`, `ko_KR`)
    /// is cut to its primary subtag; a language without texts gets English. Negative counts are
    /// spoken as 0.
    ///
    /// Speak it with a voice of that language (`VoiceMap.Choice.language`): when the map fell back
    /// to English or the language is not in `languages`, the text must be English too.
    public func text(language: String) -> String {
        let book = Phrasebook.books[Phrasebook.primarySubtag(of: language)] ?? Phrasebook.English.book
        return switch self {
        case .ready: book.ready
        case .connected: book.connected
        case .connectionLost: book.connectionLost
        case .cameraLost: book.cameraLost
        case .cameraBack: book.cameraBack
        case .authenticationFailed: book.authenticationFailed
        case .usageLow(let minutes): book.usageLow(max(0, minutes))
        case .usageExhausted: book.usageExhausted
        case .usageRemaining(let minutes): book.usageRemaining(max(0, minutes))
        case .usageUnlimited: book.usageUnlimited
        case .guidanceUnavailable: book.guidanceUnavailable
        case .guidanceLocal: book.guidanceLocal
        case .guidanceFromServer: book.guidanceFromServer
        case .noToken: book.noToken
        case .recordingOnly: book.recordingOnly
        case .pairingCode(let code): book.pairingCode(Phrasebook.groups(of: code, digits: book.digits, comma: book.comma))
        case .paired(let owner): book.paired(owner)
        case .incidentSaved: book.incidentSaved
        case .parkingEvents(let count): book.parkingEvents(max(0, count))
        }
    }
}

/// All texts of one language; a count arrives as a number of minutes, 0 or more.
struct Phrasebook: Sendable {
    var ready: String
    var connected: String
    var connectionLost: String
    var cameraLost: String
    var cameraBack: String
    var authenticationFailed: String
    var usageLow: @Sendable (Int) -> String
    var usageExhausted: String
    var usageRemaining: @Sendable (Int) -> String
    var usageUnlimited: String
    var guidanceUnavailable: String
    var guidanceLocal: String
    var guidanceFromServer: String
    var noToken: String
    var recordingOnly: String
    /// Takes the code as it is to be read: groups of three digits, each digit a word apart.
    var pairingCode: @Sendable (String) -> String
    var paired: @Sendable (String) -> String
    var incidentSaved: String
    var parkingEvents: @Sendable (Int) -> String
    /// How a digit is written to be read as one digit (the ja voice reads only kana).
    var digits: [String] = (0...9).map(String.init)
    /// The pause between groups of digits, as the language writes it.
    var comma = ", "

    static let books: [String: Phrasebook] = [
        "en": English.book, "ko": Korean.book, "ja": Japanese.book, "zh": Chinese.book,
        "de": German.book, "es": Spanish.book, "fr": French.book, "pt": Portuguese.book
    ]

    /// `012345678` as `0 1 2, 3 4 5, 6 7 8`: a voice reads each digit, with a pause after each
    /// group. Anything but digits in `code` is left out.
    static func groups(of code: String, digits: [String], comma: String) -> String {
        let spoken = code.compactMap { $0.wholeNumberValue.map { digits[$0] } }
        return stride(from: 0, to: spoken.count, by: 3)
            .map { spoken[$0..<min($0 + 3, spoken.count)].joined(separator: " ") }
            .joined(separator: comma)
    }

    static func primarySubtag(of language: String) -> String {
        String(language.lowercased().prefix { $0 != "-" && $0 != "_" })
    }
}

// MARK: - The texts, one language each

extension Phrasebook {
    enum English {
        static let book = Phrasebook(
            ready: "Dashcam ready.",
            connected: "Connected to guidance.",
            connectionLost: "Connection lost.",
            cameraLost: "Camera lost.",
            cameraBack: "Camera is back.",
            authenticationFailed: "Authentication failed. Check the device token.",
            usageLow: { "Guidance time is running low: \(minutes($0)) left." },
            usageExhausted: "Guidance time is used up.",
            usageRemaining: { "\(minutes($0)) of guidance left." },
            usageUnlimited: "Unlimited guidance.",
            guidanceUnavailable: "Guidance is unavailable for now. Recording continues.",
            guidanceLocal: "No guidance from the server. The camera now warns on its own.",
            guidanceFromServer: "Guidance from the server is back.",
            noToken: "No device token. Recording continues without guidance.",
            recordingOnly: "Recording. No guidance server is set.",
            pairingCode: { "To pair this car, enter the code \($0). Again: \($0)." },
            paired: { "Paired with the account of \($0)." },
            incidentSaved: "Incident saved.",
            parkingEvents: {
                $0 == 0 ? "No parking events while parked." : $0 == 1 ? "One parking event saved." : "\($0) parking events saved."
            }
        )
        private static func minutes(_ n: Int) -> String { n == 1 ? "1 minute" : "\(n) minutes" }
    }

    enum Korean {
        static let book = Phrasebook(
            ready: "블랙박스가 준비되었습니다.",
            connected: "안내 서버에 연결되었습니다.",
            connectionLost: "연결이 끊어졌습니다.",
            cameraLost: "카메라 연결이 끊어졌습니다.",
            cameraBack: "카메라가 다시 연결되었습니다.",
            authenticationFailed: "인증에 실패했습니다. 기기 토큰을 확인하세요.",
            usageLow: { "안내 시간이 얼마 남지 않았습니다. \($0)분 남았습니다." },
            usageExhausted: "안내 시간을 모두 사용했습니다.",
            usageRemaining: { "안내 시간이 \($0)분 남았습니다." },
            usageUnlimited: "안내 시간에 제한이 없습니다.",
            guidanceUnavailable: "지금은 안내를 받을 수 없습니다. 녹화는 계속됩니다.",
            guidanceLocal: "서버 안내가 없어 기기가 직접 경고합니다.",
            guidanceFromServer: "서버 안내가 다시 시작되었습니다.",
            noToken: "기기 토큰이 없습니다. 안내 없이 녹화를 계속합니다.",
            recordingOnly: "녹화 중입니다. 안내 서버가 설정되지 않았습니다.",
            pairingCode: { "이 차를 연결하려면 코드 \($0) 을 입력하세요. 다시 한 번: \($0)." },
            paired: { "\($0) 계정과 연결되었습니다." },
            incidentSaved: "사고 영상을 저장했습니다.",
            parkingEvents: { $0 == 0 ? "주차 중 이벤트가 없었습니다." : "주차 중 이벤트 영상 \($0)개를 저장했습니다." }
        )
    }

    enum Japanese {
        // Kana only, and no topic particle は: the voice reads it "ha", not "wa".
        static let book = Phrasebook(
            ready: "ドライブレコーダーの じゅんびが できました。",
            connected: "ガイダンスに せつぞく しました。",
            connectionLost: "せつぞくが きれました。",
            cameraLost: "カメラの せつぞくが きれました。",
            cameraBack: "カメラが もどりました。",
            authenticationFailed: "にんしょうに しっぱい しました。デバイス トークンを かくにん してください。",
            usageLow: { "ガイダンスの のこりじかんが すくなく なりました。あと \(minutes($0))です。" },
            usageExhausted: "ガイダンスの じかんを つかいきりました。",
            usageRemaining: { "ガイダンスが あと \(minutes($0)) つかえます。" },
            usageUnlimited: "ガイダンスを むせいげんで つかえます。",
            guidanceUnavailable: "いまは ガイダンスが つかえません。ろくがは つづけます。",
            guidanceLocal: "サーバーの ガイダンスが ないので、この きかいが みずから けいこくします。",
            guidanceFromServer: "サーバーの ガイダンスが もどりました。",
            noToken: "デバイス トークンが ありません。ガイダンス なしで ろくがを つづけます。",
            recordingOnly: "ろくが ちゅうです。ガイダンス サーバーは せってい されて いません。",
            pairingCode: { "この くるまを つなぐには、コード \($0) を にゅうりょく して ください。もう いちど、\($0)。" },
            paired: { "\($0) の アカウントと つながりました。" },
            incidentSaved: "じこの えいぞうを ほぞん しました。",
            parkingEvents: { $0 == 0 ? "ちゅうしゃちゅうの イベントは ありませんでした。" : "ちゅうしゃちゅうの イベントを \(events($0)) ほぞん しました。" },
            digits: ["ぜろ", "いち", "に", "さん", "よん", "ご", "ろく", "なな", "はち", "きゅう"],
            comma: "、"
        )

        /// `n` minutes in hiragana with the counter's sound changes: いっぷん, にふん, さんぷん,
        /// じゅっぷん, ひゃっぷん, せんぷん. From 100,000,000 on, digits (the voice reads them).
        static func minutes(_ n: Int) -> String {
            guard n < 100_000_000 else { return "\(n)ふん" }
            let number = japaneseNumber(n)
            if number.hasSuffix("じゅう") || number.hasSuffix("ち") || number.hasSuffix("く") {
                return String(number.dropLast()) + "っぷん"  // じゅう, いち, はち, ろく, ひゃく
            }
            return number + (number.hasSuffix("ん") ? "ぷん" : "ふん")
        }

        /// `n` things counted with 件 in hiragana, with the counter's sound changes: いっけん,
        /// にけん, ろっけん, はっけん, じゅっけん, ひゃっけん. From 100,000,000 on, digits.
        static func events(_ n: Int) -> String {
            guard n < 100_000_000 else { return "\(n)けん" }
            let number = japaneseNumber(n)
            if number.hasSuffix("じゅう") || number.hasSuffix("ち") || number.hasSuffix("く") {
                return String(number.dropLast()) + "っけん"
            }
            return number + "けん"
        }

        /// `n` (0 ..< 100,000,000) in hiragana: 43 → よんじゅうさん, 10,000 → いちまん.
        static func japaneseNumber(_ n: Int) -> String {
            if n == 0 { return "ぜろ" }
            if n >= 10_000 {
                return japaneseNumber(n / 10_000) + "まん" + (n % 10_000 == 0 ? "" : japaneseNumber(n % 10_000))
            }
            let ones = ["", "いち", "に", "さん", "よん", "ご", "ろく", "なな", "はち", "きゅう"]
            let tens = ["", "じゅう"] + ones[2...].map { $0 + "じゅう" }
            let hundreds = [
                "", "ひゃく", "にひゃく", "さんびゃく", "よんひゃく", "ごひゃく", "ろっぴゃく", "ななひゃく", "はっぴゃく", "きゅうひゃく"
            ]
            let thousands = ["", "せん", "にせん", "さんぜん", "よんせん", "ごせん", "ろくせん", "ななせん", "はっせん", "きゅうせん"]
            return thousands[n / 1000] + hundreds[n / 100 % 10] + tens[n / 10 % 10] + ones[n % 10]
        }
    }

    enum Chinese {
        static let book = Phrasebook(
            ready: "行车记录仪已就绪。",
            connected: "驾驶指引已连接。",
            connectionLost: "连接已断开。",
            cameraLost: "摄像头已断开。",
            cameraBack: "摄像头已恢复。",
            authenticationFailed: "认证失败，请检查设备令牌。",
            usageLow: { "驾驶指引时间即将用完，还剩\(minutes($0))。" },
            usageExhausted: "驾驶指引时间已用完。",
            usageRemaining: { "驾驶指引还剩\(minutes($0))。" },
            usageUnlimited: "驾驶指引不限时。",
            guidanceUnavailable: "驾驶指引暂时不可用，录像继续。",
            guidanceLocal: "没有服务器指引，现在由本机提醒。",
            guidanceFromServer: "服务器指引已恢复。",
            noToken: "没有设备令牌。继续录像，但没有指引。",
            recordingOnly: "正在录像。没有设置指引服务器。",
            pairingCode: { "要配对这辆车，请输入代码 \($0)。再说一遍：\($0)。" },
            paired: { "已与\($0)的账户配对。" },
            incidentSaved: "事故视频已保存。",
            parkingEvents: { $0 == 0 ? "停车期间没有事件。" : "停车期间保存了\($0)个事件。" },
            comma: "，"
        )
        private static func minutes(_ n: Int) -> String { n == 2 ? "两分钟" : "\(n)分钟" }
    }

    enum German {
        static let book = Phrasebook(
            ready: "Dashcam bereit.",
            connected: "Fahrhinweise verbunden.",
            connectionLost: "Verbindung verloren.",
            cameraLost: "Kamera getrennt.",
            cameraBack: "Kamera wieder da.",
            authenticationFailed: "Anmeldung fehlgeschlagen. Bitte Geräte-Token prüfen.",
            usageLow: { "Zeit für Fahrhinweise wird knapp: noch \(minutes($0))." },
            usageExhausted: "Zeit für Fahrhinweise aufgebraucht.",
            usageRemaining: { "Noch \(minutes($0)) Fahrhinweise." },
            usageUnlimited: "Fahrhinweise ohne Zeitlimit.",
            guidanceUnavailable: "Fahrhinweise sind gerade nicht verfügbar. Die Aufnahme läuft weiter.",
            guidanceLocal: "Keine Hinweise vom Server. Das Gerät warnt jetzt selbst.",
            guidanceFromServer: "Die Hinweise vom Server sind zurück.",
            noToken: "Kein Geräte-Token. Die Aufnahme läuft ohne Hinweise weiter.",
            recordingOnly: "Aufnahme läuft. Kein Hinweis-Server eingestellt.",
            pairingCode: { "Um dieses Auto zu koppeln, geben Sie den Code \($0) ein. Noch einmal: \($0)." },
            paired: { "Mit dem Konto von \($0) gekoppelt." },
            incidentSaved: "Vorfall gespeichert.",
            parkingEvents: {
                $0 == 0 ? "Keine Ereignisse beim Parken." : $0 == 1 ? "Ein Parkereignis gespeichert." : "\($0) Parkereignisse gespeichert."
            }
        )
        private static func minutes(_ n: Int) -> String { n == 1 ? "eine Minute" : "\(n) Minuten" }
    }

    enum Spanish {
        static let book = Phrasebook(
            ready: "Dashcam lista.",
            connected: "Conectado a la asistencia.",
            connectionLost: "Conexión perdida.",
            cameraLost: "Cámara desconectada.",
            cameraBack: "La cámara ha vuelto.",
            authenticationFailed: "Error de autenticación. Revisa el token del dispositivo.",
            usageLow: { "Queda poco tiempo de asistencia: \(minutes($0))." },
            usageExhausted: "Tiempo de asistencia agotado.",
            usageRemaining: { "\($0 == 1 ? "Queda" : "Quedan") \(minutes($0)) de asistencia." },
            usageUnlimited: "Asistencia ilimitada.",
            guidanceUnavailable: "La asistencia no está disponible por ahora. La grabación continúa.",
            guidanceLocal: "Sin asistencia del servidor. El equipo avisa por su cuenta.",
            guidanceFromServer: "La asistencia del servidor ha vuelto.",
            noToken: "No hay token del dispositivo. La grabación continúa sin asistencia.",
            recordingOnly: "Grabando. No hay servidor de asistencia configurado.",
            pairingCode: { "Para vincular este coche, introduzca el código \($0). Otra vez: \($0)." },
            paired: { "Vinculado con la cuenta de \($0)." },
            incidentSaved: "Incidente guardado.",
            parkingEvents: {
                $0 == 0
                    ? "Ningún evento durante el estacionamiento."
                    : $0 == 1 ? "Un evento de estacionamiento guardado." : "\($0) eventos de estacionamiento guardados."
            }
        )
        private static func minutes(_ n: Int) -> String { n == 1 ? "un minuto" : "\(n) minutos" }
    }

    enum French {
        // Not "Échec de l'authentification": the voice reads "authentification" as an English word.
        static let book = Phrasebook(
            ready: "Dashcam prête.",
            connected: "Connecté à l'assistance.",
            connectionLost: "Connexion perdue.",
            cameraLost: "Caméra déconnectée.",
            cameraBack: "Caméra reconnectée.",
            authenticationFailed: "Accès refusé. Vérifiez le jeton de l'appareil.",
            usageLow: { "Temps d'assistance bientôt épuisé : il reste \(minutes($0))." },
            usageExhausted: "Temps d'assistance épuisé.",
            usageRemaining: { "Il reste \(minutes($0)) d'assistance." },
            usageUnlimited: "Assistance illimitée.",
            guidanceUnavailable: "L'assistance est indisponible pour le moment. L'enregistrement continue.",
            guidanceLocal: "Pas d'assistance du serveur. L'appareil avertit lui-même.",
            guidanceFromServer: "L'assistance du serveur est de retour.",
            noToken: "Aucun jeton d'appareil. L'enregistrement continue sans assistance.",
            recordingOnly: "Enregistrement en cours. Aucun serveur d'assistance n'est configuré.",
            pairingCode: { "Pour associer cette voiture, saisissez le code \($0). Je répète : \($0)." },
            paired: { "Voiture associée au compte de \($0)." },
            incidentSaved: "Incident enregistré.",
            parkingEvents: {
                $0 == 0
                    ? "Aucun événement pendant le stationnement."
                    : $0 == 1 ? "Un événement de stationnement enregistré." : "\($0) événements de stationnement enregistrés."
            }
        )
        // French counts 0 in the singular too.
        private static func minutes(_ n: Int) -> String {
            switch n {
            case 0: "0 minute"
            case 1: "une minute"
            default: "\(n) minutes"
            }
        }
    }

    enum Portuguese {
        // Spelling of Brazil (câmera), understood in Portugal; both voices read it.
        static let book = Phrasebook(
            ready: "Dashcam pronta.",
            connected: "Conectado à assistência.",
            connectionLost: "Conexão perdida.",
            cameraLost: "Câmera desconectada.",
            cameraBack: "Câmera reconectada.",
            authenticationFailed: "Falha na autenticação. Verifique o token do dispositivo.",
            usageLow: { "Resta pouco tempo de assistência: \(minutes($0))." },
            usageExhausted: "Tempo de assistência esgotado.",
            usageRemaining: { "\($0 == 1 ? "Resta" : "Restam") \(minutes($0)) de assistência." },
            usageUnlimited: "Assistência ilimitada.",
            guidanceUnavailable: "A assistência está indisponível por agora. A gravação continua.",
            guidanceLocal: "Sem assistência do servidor. O aparelho avisa por conta própria.",
            guidanceFromServer: "A assistência do servidor voltou.",
            noToken: "Sem token do dispositivo. A gravação continua sem assistência.",
            recordingOnly: "Gravando. Nenhum servidor de assistência configurado.",
            pairingCode: { "Para emparelhar este carro, introduza o código \($0). Outra vez: \($0)." },
            paired: { "Emparelhado com a conta de \($0)." },
            incidentSaved: "Incidente gravado.",
            parkingEvents: {
                $0 == 0
                    ? "Nenhum evento durante o estacionamento."
                    : $0 == 1 ? "Um evento de estacionamento gravado." : "\($0) eventos de estacionamento gravados."
            }
        )
        private static func minutes(_ n: Int) -> String { n == 1 ? "um minuto" : "\(n) minutos" }
    }
}
