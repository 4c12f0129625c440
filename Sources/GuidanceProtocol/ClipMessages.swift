import Foundation
import UTC

extension ClientMessage {
    /// An event's evidence the car uploads for its owner (additive): what happened, and the
    /// evidence segment files that show it, each named with its size and SHA-256. Sent at the start
    /// of every session for each clip the server has not confirmed yet; the server answers with a
    /// ``ServerMessage/ClipHave`` saying how much of each file it holds, and the car sends the rest
    /// in ``ClipPart``s.
    public struct Clip: Codable, Sendable, Equatable {
        /// The car's own name for the event: 1 to ``maxIDLength`` of letters, digits, `.`, `_`, `-`.
        public var id: String
        /// `incident` (the G-sensor while driving), `parking` (motion or an impact while parked) or
        /// `protect` (the owner's or driver's request).
        public var kind: String
        /// The trigger, RFC 3339 UTC; `from` and `to` the window the files cover.
        public var at: String
        public var from: String
        public var to: String
        /// How the car's clock stood: `synced` (NTP or GPS), `unsynced`, or absent.
        public var clock: String?
        /// The largest gravity-removed acceleration, in g (impacts only).
        public var peakG: Double?
        /// Where the trigger falls in the clip, ms after the first file's start.
        public var triggerMs: Int?
        /// The evidence, oldest first.
        public var files: [File]
        /// The car's GPS track over the window, a point a second at most.
        public var gps: [GPSPosition]?

        public struct File: Codable, Sendable, Equatable {
            /// The file's name on the car: 1 to ``maxNameLength`` of letters, digits, `.`, `_`, `-`,
            /// ending in `.mp4`, not starting with `.`.
            public var name: String
            public var bytes: Int
            /// Lower-case hex SHA-256 of the whole file.
            public var sha256: String

            public init(name: String, bytes: Int, sha256: String) {
                self.name = name
                self.bytes = bytes
                self.sha256 = sha256
            }

            public static let maxNameLength = 96
        }

        public static let kinds: Set<String> = ["incident", "parking", "protect"]
        public static let maxIDLength = Incident.maxIDLength
        /// A clip covers at most ``maxWindowSeconds``: 40 five-second files and a margin.
        public static let maxFiles = 48
        public static let maxWindowSeconds = 300.0
        public static let maxPositions = 320

        public init(
            id: String, kind: String, at: String, from: String, to: String, clock: String? = nil, peakG: Double? = nil,
            triggerMs: Int? = nil, files: [File], gps: [GPSPosition]? = nil
        ) {
            self.id = id
            self.kind = kind
            self.at = at
            self.from = from
            self.to = to
            self.clock = clock
            self.peakG = peakG
            self.triggerMs = triggerMs
            self.files = files
            self.gps = gps
        }

        /// What is wrong with it for a server that takes files of at most `maxFileBytes`, checked
        /// before anything is done with it; nil if nothing. A GPS track out of range is not a
        /// problem of the clip: ``validGPS`` leaves it out.
        public func problem(maxFileBytes: Int) -> String? {
            guard Self.isClipID(id) else {
                return "a clip id must be 1 to \(Self.maxIDLength) letters, digits, '.', '_' or '-', not starting with '.'"
            }
            guard Self.kinds.contains(kind) else { return "kind must be one of \(Self.kinds.sorted().joined(separator: ", "))" }
            guard let start = Date(rfc3339: from), let end = Date(rfc3339: to), let trigger = Date(rfc3339: at) else {
                return "at, from and to must be RFC 3339 UTC times"
            }
            guard start <= trigger, trigger <= end, end.timeIntervalSince(start) <= Self.maxWindowSeconds else {
                return "from ≤ at ≤ to, at most \(Int(Self.maxWindowSeconds)) s apart"
            }
            if let clock, !(1...16).contains(clock.utf8.count) || !ClientMessage.isID(clock, maxLength: 16) {
                return "clock must be a word of at most 16 letters"
            }
            if let peakG, !peakG.isFinite || !(0...Incident.maxPeakG).contains(peakG) {
                return "peakG must be within 0…\(Int(Incident.maxPeakG))"
            }
            if let triggerMs, !(0...Int(Self.maxWindowSeconds) * 1000).contains(triggerMs) {
                return "triggerMs must be within 0…\(Int(Self.maxWindowSeconds) * 1000)"
            }
            guard (1...Self.maxFiles).contains(files.count) else { return "a clip has 1 to \(Self.maxFiles) files" }
            var names = Set<String>()
            for file in files {
                guard Self.isFileName(file.name) else {
                    return
                        "a file name must be 1 to \(File.maxNameLength) letters, digits, '.', '_' or '-', end in .mp4 and not start with '.'"
                }
                guard names.insert(file.name).inserted else { return "file \(file.name) is named twice" }
                guard (1...maxFileBytes).contains(file.bytes) else {
                    return "file \(file.name): bytes \(file.bytes) is not within 1…\(maxFileBytes)"
                }
                guard ClientMessage.isSHA256(file.sha256) else { return "file \(file.name): sha256 is not 64 hex digits" }
            }
            return nil
        }

        /// The GPS track if it is within ``maxPositions`` points and every number is in range;
        /// otherwise none (nothing is computed from a bad one).
        public var validGPS: [GPSPosition]? {
            guard let gps, gps.count <= Self.maxPositions, gps.allSatisfy(\.isValid) else { return nil }
            return gps
        }

        /// A clip's id names a folder on the server: no `.` or `..`.
        public static func isClipID(_ id: String) -> Bool {
            ClientMessage.isID(id, maxLength: maxIDLength) && !id.hasPrefix(".")
        }

        public static func isFileName(_ name: String) -> Bool {
            ClientMessage.isID(name, maxLength: File.maxNameLength) && name.hasSuffix(".mp4") && !name.hasPrefix(".") && name.utf8.count > 4
        }
    }

    /// Bytes of one of a clip's files, from `offset` (what the server said it holds) on: followed
    /// directly by exactly one binary message of `bytes` bytes (1 … 65536).
    public struct ClipPart: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        public var offset: Int
        public var bytes: Int

        public init(id: String, name: String, offset: Int, bytes: Int) {
            self.id = id
            self.name = name
            self.offset = offset
            self.bytes = bytes
        }

        /// What is wrong with it, checked before its bytes are read; nil if nothing.
        public func problem(maxFileBytes: Int) -> String? {
            guard Clip.isClipID(id) else { return "not a clip id" }
            guard Clip.isFileName(name) else { return "not a clip file's name" }
            guard (1...GuidanceProtocol.maxMessageBytes).contains(bytes) else {
                return "bytes \(bytes) is not within 1…\(GuidanceProtocol.maxMessageBytes)"
            }
            // bytes ≤ 64 KiB: the sum cannot overflow once offset is in range.
            guard offset >= 0 else { return "offset \(offset) is negative" }
            guard offset < maxFileBytes, offset + bytes <= maxFileBytes else {
                return "offset \(offset) and bytes \(bytes) reach past \(maxFileBytes)"
            }
            return nil
        }
    }

    static func isID(_ text: String, maxLength: Int) -> Bool {
        (1...maxLength).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
                    || byte == UInt8(ascii: "-")
            }
    }

    static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            }
    }
}

extension ServerMessage {
    /// How much of each of a clip's files the server holds: the answer to a `clip` (every file)
    /// and to each `clip_part` (its file). `have` equal to the file's `bytes` means the file is
    /// stored and its SHA-256 matched; `stored` that every file of the clip is.
    public struct ClipHave: Codable, Sendable, Equatable {
        public struct Held: Codable, Sendable, Equatable {
            public var name: String
            public var have: Int
            public init(name: String, have: Int) {
                self.name = name
                self.have = have
            }
        }

        public var id: String
        public var files: [Held]
        public var stored: Bool

        public init(id: String, files: [Held], stored: Bool) {
            self.id = id
            self.files = files
            self.stored = stored
        }
    }
}
