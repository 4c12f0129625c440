import ConfigSupport
import Foundation
import HAL

/// What `dashcam-agent setup --board NAME` writes to agent.yaml: a board profile, what the camera
/// really offers, and every key the user set, merged. Pure: `SetupCommand` reads the files and the
/// camera, and writes the result.
///
/// Whose a key is, per key:
/// 1. **yours**: the current file sets it to a value that is neither the package's default
///    (`default.yaml`) nor what a previous `setup` wrote (listed in that file's header). Kept.
/// 2. **camera**: `camera.device` (a stable name), size, rate and pixel format the camera offers.
/// 3. **board**: what the profile sets.
/// 4. **package**: the rest of what the current file (or, with none, `default.yaml`) sets. A value
///    a previous `setup` chose that no one chooses now goes back to the package's default.
struct BoardSetup {
    /// A config file as loaded, and the keys it sets.
    struct File {
        var config: AgentConfig
        var keys: Set<String>
    }

    enum Source: String, Sendable {
        /// `measured`: chosen from what the encoders did on this board (`doctor --encoders`' trials).
        case yours, camera, measured, board, package
    }

    /// What the camera offers for the wanted size and rate, as keys.
    struct CameraChoice: Equatable {
        var device: String
        var width: Int
        var height: Int
        var fps: Int
        var pixelFormat: AgentConfig.CapturePixelFormat
        /// Where the camera could not give what was wanted, in words.
        var notes: [String] = []
    }

    struct Outcome {
        var config: AgentConfig
        /// The keys written, in documentation order, with whose they are.
        var written: [(key: ConfigKeyInfo<AgentConfig>, source: Source)]
        /// A board or camera value not taken because the key is yours.
        var overridden: [String]
    }

    /// The header line that starts the list of what `setup` chose.
    static let choicesMarker = "# setup chose (change one and a later setup keeps your value):"

    let board: String
    let profile: File
    /// The package's `default.yaml`.
    let shipped: File
    /// The agent.yaml there now, if any.
    let current: File?
    /// What a previous `setup` wrote: key → value as YAML, from the current file's header.
    let previous: [String: String]

    /// The keys the current file sets to a value of the user's own.
    var yours: Set<String> {
        guard let current else { return [] }
        return Set(
            AgentConfig.keys.filter { key in
                let value = key.yaml(in: current.config)
                return current.keys.contains(key.name) && value != key.yaml(in: shipped.config) && value != previous[key.name]
            }.map(\.name))
    }

    /// Which of `preference` to keep, from each one's trial on this board at the evidence's size
    /// and rate: those that opened and keep up with the camera, in the profile's order, then the
    /// last software one that opened as the fallback should the hardware fail at a start (a Pi
    /// short of CMA). Nil when no trial opened anything or none keeps up: the profile's list stays,
    /// with a note.
    static func chooseEncoders(_ preference: [String], trials: [EncoderBench.Trial]) -> (kept: [String]?, notes: [String]) {
        let byName = Dictionary(trials.map { ($0.encoder, $0) }) { first, _ in first }
        let opened = preference.filter { byName[$0]?.opened == true }
        let sustaining = opened.filter { byName[$0]?.sustains == true }
        var notes: [String] = []
        for name in preference {
            guard let trial = byName[name] else { continue }
            if !trial.opened {
                notes.append("\(name): does not open here (\(trial.reason ?? "?")), left out")
            } else if trial.sustains != true {
                notes.append(String(format: "%@: %.0f frames/s at %@, too slow for it", name, trial.fps ?? 0, trial.format))
            }
        }
        guard !sustaining.isEmpty else {
            notes.append(
                opened.isEmpty
                    ? "no encoder of the profile opens here: its list is kept; see `dashcam-agent doctor`"
                    : "no encoder keeps up at this size and rate: the profile's list is kept; set a smaller camera.width/height or fps")
            return (nil, notes)
        }
        var kept = sustaining
        if let fallback = opened.last(where: { $0.hasPrefix("lib") }), !kept.contains(fallback) { kept.append(fallback) }
        return (kept, notes)
    }

    /// The merged config; with a camera, its keys take what the camera offers (unless they are
    /// yours); with `encoders`, `encoder.preference` takes them (unless it is yours).
    func merge(camera: CameraChoice? = nil, encoders: [String]? = nil) -> Outcome {
        let yours = yours
        let base = current ?? shipped
        var config = AgentConfig()
        var written: [(key: ConfigKeyInfo<AgentConfig>, source: Source)] = []
        var overridden: [String] = []
        var cameraValues: [String: AgentConfig] = [:]
        if let camera {
            var chosen = AgentConfig()
            chosen.camera.source = .v4l2
            chosen.camera.device = camera.device
            chosen.camera.width = camera.width
            chosen.camera.height = camera.height
            chosen.camera.fps = camera.fps
            chosen.camera.pixelFormat = camera.pixelFormat
            for name in ["camera.source", "camera.device", "camera.width", "camera.height", "camera.fps", "camera.pixelFormat"] {
                cameraValues[name] = chosen
            }
        }
        var measuredValues: [String: AgentConfig] = [:]
        if let encoders {
            var measured = AgentConfig()
            measured.encoder.preference = encoders
            measuredValues["encoder.preference"] = measured
        }
        for key in AgentConfig.keys {
            let offered = cameraValues[key.name] ?? measuredValues[key.name] ?? (profile.keys.contains(key.name) ? profile.config : nil)
            if yours.contains(key.name), let current {
                key.copy(from: current.config, to: &config)
                written.append((key, .yours))
                if let offered, let value = key.yaml(in: offered), value != key.yaml(in: current.config) {
                    overridden.append(
                        "\(key.name): kept yours, \(key.yaml(in: current.config) ?? "unset"); "
                            + "the \(cameraValues[key.name] != nil ? "camera" : measuredValues[key.name] != nil ? "trial of the encoders" : "board") gives \(value)"
                    )
                }
            } else if let chosen = cameraValues[key.name] {
                key.copy(from: chosen, to: &config)
                written.append((key, .camera))
            } else if let chosen = measuredValues[key.name] {
                key.copy(from: chosen, to: &config)
                written.append((key, .measured))
            } else if profile.keys.contains(key.name) {
                key.copy(from: profile.config, to: &config)
                written.append((key, .board))
            } else if previous[key.name] != nil {
                guard shipped.keys.contains(key.name) else { continue }
                key.copy(from: shipped.config, to: &config)
                written.append((key, .package))
            } else if base.keys.contains(key.name) {
                key.copy(from: base.config, to: &config)
                written.append((key, .package))
            }
        }
        return Outcome(config: config, written: written, overridden: overridden)
    }

    /// The file: a header naming the board and listing what `setup` chose, then the sections.
    func render(_ outcome: Outcome, version: String) -> String {
        var text =
            "# The agent's config, written by `dashcam-agent setup --board \(board)` (\(version)).\n"
            + "# Every key is described in /usr/share/doc/dashcam-agent/CONFIG.md. The service reads this\n"
            + "# file when it starts: sudo systemctl restart dashcam-agent.\n"
            + "#\n" + Self.choicesMarker + "\n"
        for (key, source) in outcome.written where source == .camera || source == .measured || source == .board {
            text += "#   \(key.name): \(key.yaml(in: outcome.config) ?? "")\n"
        }
        var section = ""
        for (key, _) in outcome.written {
            guard let value = key.yaml(in: outcome.config) else { continue }
            let parts = key.name.split(separator: ".", maxSplits: 1).map(String.init)
            if parts[0] != section {
                section = parts[0]
                text += "\n\(section):\n"
            }
            text += "  \(parts[1]): \(value)\n"
        }
        return text
    }

    /// What a previous `setup` chose, from the header of the file it wrote.
    static func previousChoices(in text: String) -> [String: String] {
        var choices: [String: String] = [:]
        var inList = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == choicesMarker {
                inList = true
                continue
            }
            guard inList else { continue }
            guard line.hasPrefix("#   "), let colon = line.firstIndex(of: ":") else { break }
            let key = line[line.index(line.startIndex, offsetBy: 4)..<colon]
            choices[String(key)] = String(line[line.index(after: colon)...].drop { $0 == " " })
        }
        return choices
    }
}

// MARK: - The camera

extension BoardSetup {
    /// The formats a size and rate are looked for in, in the order the agent's `auto` takes them
    /// (the camera's own YUV first), MJPEG last: it is decoded on the CPU (libavcodec).
    static let formats: [(fourcc: String, choice: AgentConfig.CapturePixelFormat)] = [
        ("YUYV", .yuyv), ("NV12", .nv12), ("YU12", .yu12), ("MJPG", .mjpeg)
    ]

    /// The size, rate and pixel format closest to `wanted` that `camera` offers, named by `device`.
    ///
    /// The wanted size and rate in any format first (the camera's own YUV before MJPEG); else the
    /// nearest size of the same shape, then the nearest rate not above the wanted one. A pixel
    /// format that `auto` would choose anyway stays `auto`.
    static func chooseFormat(for wanted: AgentConfig.Camera, on camera: V4L2DeviceInfo, device: String) -> CameraChoice {
        var choice = CameraChoice(
            device: device, width: wanted.width, height: wanted.height, fps: wanted.fps, pixelFormat: wanted.pixelFormat)
        var usable = formats.compactMap { format in
            camera.formats.first { $0.fourcc == format.fourcc && !$0.emulated }.map { (format.choice, $0) }
        }
        if wanted.pixelFormat != .auto {
            let forced = usable.filter { $0.0 == wanted.pixelFormat }
            if forced.isEmpty {
                choice.notes.append("the camera has no \(wanted.pixelFormat.rawValue) format: camera.pixelFormat auto")
                choice.pixelFormat = .auto
            } else {
                usable = forced
            }
        }
        guard !usable.isEmpty else {
            choice.notes.append("the camera offers none of YUYV, NV12, YU12 or MJPEG: size and rate as the board asks")
            return choice
        }
        struct Candidate {
            var format: AgentConfig.CapturePixelFormat
            var width: Int
            var height: Int
            var fps: Int
            var score: [Int]
        }
        let wantedPixels = wanted.width * wanted.height
        var candidates: [Candidate] = []
        for (order, (format, entry)) in usable.enumerated() {
            var sizes = entry.sizes
            if entry.range != nil, Self.offers(entry, width: wanted.width, height: wanted.height) {
                // Its rates are listed for the largest size only: the wanted one is asked, and granted or not.
                sizes = [V4L2DeviceInfo.Size(width: wanted.width, height: wanted.height, fps: [])]
            }
            for size in sizes {
                let rate = Self.rate(for: wanted.fps, among: size.fps)
                let exactSize = size.width == wanted.width && size.height == wanted.height
                let sameShape = size.width * wanted.height == size.height * wanted.width
                candidates.append(
                    Candidate(
                        format: format, width: size.width, height: size.height, fps: rate.fps,
                        score: [
                            exactSize ? 0 : 1, rate.rank == 0 ? 0 : 1, sameShape ? 0 : 1,
                            abs(size.width * size.height - wantedPixels), rate.rank, abs(rate.fps - wanted.fps), order
                        ]))
            }
        }
        guard let best = candidates.min(by: { $0.score.lexicographicallyPrecedes($1.score) }) else {
            choice.notes.append("the camera lists no sizes: size and rate as the board asks")
            return choice
        }
        if best.width != wanted.width || best.height != wanted.height {
            choice.notes.append("the camera has no \(wanted.width)x\(wanted.height): \(best.width)x\(best.height), the nearest it offers")
        }
        if best.fps != wanted.fps {
            choice.notes.append("the camera has no \(wanted.fps) fps at \(best.width)x\(best.height): \(best.fps), the nearest it offers")
        }
        choice.width = best.width
        choice.height = best.height
        choice.fps = best.fps
        // What `auto` takes at this size: the first of the camera's own YUV formats that has it.
        let automatic = usable.first { $0.0 != .mjpeg && Self.offers($0.1, width: best.width, height: best.height) }?.0
        choice.pixelFormat = choice.pixelFormat != .auto ? best.format : (best.format == automatic ? .auto : best.format)
        return choice
    }

    private static func offers(_ format: V4L2DeviceInfo.Format, width: Int, height: Int) -> Bool {
        if let range = format.range {
            return (range.minWidth...range.maxWidth).contains(width) && (range.minHeight...range.maxHeight).contains(height)
        }
        return format.sizes.contains { $0.width == width && $0.height == height }
    }

    /// The wanted rate if offered (rank 0), else the highest below it (1), else the lowest above (2).
    /// No rates listed: the wanted one, which the camera then grants or not.
    private static func rate(for wanted: Int, among offered: [Double]) -> (fps: Int, rank: Int) {
        let rates = Set(offered.map { Int($0.rounded()) }.filter { $0 > 0 })
        if rates.isEmpty || rates.contains(wanted) { return (wanted, 0) }
        if let below = rates.filter({ $0 < wanted }).max() { return (below, 1) }
        return (rates.min() ?? wanted, 2)
    }
}
