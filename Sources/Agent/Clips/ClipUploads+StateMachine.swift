public import GuidanceProtocol

/// The clips the car uploads for its owner: the rules (``StateMachine``).
public enum ClipUploads {}

extension ClipUploads {
    /// The clips the car owes its owner's server, and the rules for sending them, apart from any
    /// socket or disk: events in, what to send out.
    ///
    /// - On every new session each clip not yet stored is announced (`clip`); the server's answer
    ///   (`clip_have`) says how much of each file it holds, so an upload cut by a dropped link, a
    ///   reboot or a killed server goes on from what reached the server's disk, never from a guess.
    /// - Then one part at a time (`clip_part` and its bytes, at most 64 KiB), the oldest clip first,
    ///   and only while no live segment waits: the road's segments always go first, and with one
    ///   part in flight a segment waits behind at most one part.
    /// - Every `clip` and `clip_part` gets exactly one answer, in order (``ClientMessage/Clip``), so
    ///   the answers are matched to what was sent by their order. A `bad_clip` answer to an announce
    ///   sets that clip aside until the next session; one to a part announces the clip again (the
    ///   server may have lost its description); a clip refused ``maxRefusals`` times on a session is
    ///   set aside too.
    /// - A day's bytes are limited (`upload.dailyMegabytes`, the day passed in), and uploads may be
    ///   held back while the uplink is not on wireless LAN (`upload.when: wifi`).
    /// - A clip leaves only when the server says every file of it is stored.
    public struct StateMachine: Sendable {
        public struct Settings: Sendable, Equatable {
            /// Bytes of clip parts a day; nil is unlimited.
            public var dailyBytes: Int?
            /// Only on wireless LAN.
            public var wifiOnly: Bool

            public init(dailyBytes: Int? = nil, wifiOnly: Bool = false) {
                self.dailyBytes = dailyBytes
                self.wifiOnly = wifiOnly
            }
        }

        /// A message to send now.
        public enum Send: Sendable, Equatable {
            case announce(ClientMessage.Clip)
            /// The part's bytes are the file's from `offset`, `bytes` of them.
            case part(ClientMessage.ClipPart)
        }

        /// What the server's answers meant.
        public enum Event: Sendable, Equatable {
            /// Every file of the clip is stored: it may leave the car's custody.
            case stored(String)
            /// The server holds less of a file than it said before: it dropped it (its bytes did not
            /// match their SHA-256) and the file is sent again.
            case dropped(clip: String, file: String)
            /// The server refused a clip or part; `setAside`: not tried again on this session.
            case refused(clip: String, reason: String, setAside: Bool)
            /// The first answer on a session: the server already holds `held` of the clip's `bytes`
            /// (an upload cut short before), and the upload goes on from there.
            case resuming(clip: String, held: Int, bytes: Int)
        }

        /// Why nothing is sent now, for `status`.
        public enum Waiting: String, Sendable, Equatable {
            case nothing, session, segments, answer, budget, wifi
        }

        struct Pending: Sendable {
            var clip: ClientMessage.Clip
            /// Bytes the server holds of each file, by name, from its last answer on this session.
            var have: [String: Int]?
            /// `bad_clip` answers on this session, whatever came between them: a server that takes
            /// the announce but refuses every part does not get the same part again and again.
            var refusals = 0
            var setAside = false
        }

        enum Asked: Sendable, Equatable {
            case announce(String)
            case part(ClientMessage.ClipPart)
        }

        public static let maxRefusals = 3
        public static let partBytes = GuidanceProtocol.maxMessageBytes

        public let settings: Settings
        /// Oldest first.
        private(set) var pending: [Pending] = []
        /// Sent on this session and not answered yet, in the order sent.
        private(set) var asked: [Asked] = []
        private var sessionOpen = false
        private var unsentAnnounces: [String] = []
        private var day: Int?
        public private(set) var bytesToday = 0
        public private(set) var onWifi = false

        public init(settings: Settings) { self.settings = settings }

        /// Clips waiting, oldest first, and the bytes of them the server is not known to hold.
        public var waiting: [(id: String, clip: ClientMessage.Clip, bytesLeft: Int)] {
            pending.map { entry in
                (entry.clip.id, entry.clip, entry.clip.files.reduce(0) { $0 + $1.bytes - min($1.bytes, entry.have?[$1.name] ?? 0) })
            }
        }

        /// Bytes of parts sent on `day` (the count is of the last day a part was asked for).
        public func bytesToday(on day: Int) -> Int { self.day == day ? bytesToday : 0 }

        /// Is an answer to a `clip` or `clip_part` awaited on this session?
        public var awaitingAnswer: Bool { !asked.isEmpty }

        /// A clip to send (or its newer description: the same id): announced on the session open now,
        /// if any, and on every session until it is stored.
        public mutating func add(_ clip: ClientMessage.Clip) {
            if let index = pending.firstIndex(where: { $0.clip.id == clip.id }) {
                pending[index] = Pending(clip: clip)
            } else {
                pending.append(Pending(clip: clip))
            }
            if sessionOpen, !unsentAnnounces.contains(clip.id) { unsentAnnounces.append(clip.id) }
        }

        /// A clip that cannot be sent (its files are gone from the card): forgotten, and when the
        /// part just taken by ``next(segmentsWaiting:day:)`` was of it, that part was not sent.
        public mutating func withdraw(_ id: String) {
            if case .part(let part)? = asked.last, part.id == id {
                asked.removeLast()
                bytesToday -= min(bytesToday, part.bytes)
            }
            pending.removeAll { $0.clip.id == id }
            unsentAnnounces.removeAll { $0 == id }
        }

        /// A session opened: every clip is announced on it, and nothing the server said before counts.
        public mutating func opened() {
            sessionOpen = true
            asked = []
            for index in pending.indices {
                pending[index].have = nil
                pending[index].refusals = 0
                pending[index].setAside = false
            }
            unsentAnnounces = pending.map(\.clip.id)
        }

        /// The session ended: what it did not answer is asked again on the next.
        public mutating func closed() {
            sessionOpen = false
            asked = []
            unsentAnnounces = []
        }

        /// The uplink's interface is (or is not) a wireless LAN.
        public mutating func network(wifi: Bool) { onWifi = wifi }

        /// What to send now, if anything: announces first; then one part, when nothing is awaited,
        /// no segment waits (`segmentsWaiting`), the network and the day's budget allow.
        /// `day` is the wall clock's day (days since 1970, local), for the budget.
        public mutating func next(segmentsWaiting: Bool, day: Int) -> Send? {
            if self.day != day {
                self.day = day
                bytesToday = 0
            }
            guard sessionOpen else { return nil }
            while let id = unsentAnnounces.first {
                unsentAnnounces.removeFirst()
                guard let entry = pending.first(where: { $0.clip.id == id }) else { continue }
                asked.append(.announce(id))
                return .announce(entry.clip)
            }
            guard whyWaiting(segmentsWaiting: segmentsWaiting) == .nothing, let part = nextPart() else { return nil }
            bytesToday += part.bytes
            asked.append(.part(part))
            return .part(part)
        }

        /// Why no part would go now.
        public func whyWaiting(segmentsWaiting: Bool) -> Waiting {
            guard sessionOpen else { return .session }
            if segmentsWaiting { return .segments }
            if !asked.isEmpty || !unsentAnnounces.isEmpty { return .answer }
            if settings.wifiOnly, !onWifi { return .wifi }
            if let limit = settings.dailyBytes, let part = nextPart(), bytesToday + part.bytes > limit { return .budget }
            return .nothing
        }

        /// The part that would go next (if nothing else held it back), and whether it is a file's
        /// last: the server then checks the whole file's SHA-256 and makes it durable before it
        /// answers, the slowest answer of all.
        public var upcomingPart: (part: ClientMessage.ClipPart, finishesFile: Bool)? {
            guard let part = nextPart(),
                let file = pending.first(where: { $0.clip.id == part.id })?.clip.files.first(where: { $0.name == part.name })
            else { return nil }
            return (part, part.offset + part.bytes == file.bytes)
        }

        private func nextPart() -> ClientMessage.ClipPart? {
            for entry in pending where !entry.setAside {
                guard let have = entry.have else { continue }
                for file in entry.clip.files {
                    let held = have[file.name] ?? 0
                    guard held < file.bytes else { continue }
                    return .init(id: entry.clip.id, name: file.name, offset: held, bytes: min(Self.partBytes, file.bytes - held))
                }
            }
            return nil
        }

        /// The server's `clip_have`: the answer to the oldest message awaiting one.
        public mutating func heard(_ answer: ServerMessage.ClipHave) -> [Event] {
            guard sessionOpen else { return [] }
            if !asked.isEmpty { asked.removeFirst() }
            guard let index = pending.firstIndex(where: { $0.clip.id == answer.id }) else { return [] }
            if answer.stored {
                pending.remove(at: index)
                return [.stored(answer.id)]
            }
            var events: [Event] = []
            let first = pending[index].have == nil
            var have = pending[index].have ?? [:]
            for held in answer.files where pending[index].clip.files.contains(where: { $0.name == held.name }) {
                if let before = have[held.name], held.have < before { events.append(.dropped(clip: answer.id, file: held.name)) }
                have[held.name] = max(0, held.have)
            }
            pending[index].have = have
            let clip = pending[index].clip
            let held = clip.files.reduce(0) { $0 + min($1.bytes, have[$1.name] ?? 0) }
            if first, held > 0 { events.append(.resuming(clip: answer.id, held: held, bytes: clip.files.reduce(0) { $0 + $1.bytes })) }
            return events
        }

        /// The server's `bad_clip` error: the answer to the oldest message awaiting one.
        public mutating func refused(_ reason: String) -> [Event] {
            guard sessionOpen, !asked.isEmpty else { return [] }
            let question = asked.removeFirst()
            let id: String
            switch question {
            case .announce(let clip): id = clip
            case .part(let part): id = part.id
            }
            guard let index = pending.firstIndex(where: { $0.clip.id == id }) else { return [] }
            pending[index].refusals += 1
            pending[index].have = nil
            if case .announce = question { pending[index].setAside = true }
            if pending[index].refusals >= Self.maxRefusals { pending[index].setAside = true }
            if !pending[index].setAside { unsentAnnounces.append(id) }
            return [.refused(clip: id, reason: reason, setAside: pending[index].setAside)]
        }
    }
}
