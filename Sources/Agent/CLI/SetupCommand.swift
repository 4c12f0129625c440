import ArgumentParser
import ConfigSupport
import Foundation
import GuidanceProtocol
import HAL

/// `dashcam-agent setup --board NAME`: writes agent.yaml from a board profile and the camera that
/// is plugged in, keeping every key the user set (``BoardSetup`` has the rules).
struct SetupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "setup",
        abstract: "Write agent.yaml from a board profile and the camera found here, keeping the keys you set.",
        discussion: """
            The camera is named by its /dev/v4l/by-id/ link (else by-path), with a size, rate and pixel \
            format it offers, as close as it has to the board's. Keys you set in the file are kept; the \
            previous file is kept as agent.yaml.before-setup. Each encoder of the profile is tried on a \
            few seconds of generated video at the camera's size and rate, and only those that keep up \
            are written (--no-encoder-check: the profile's list as it is). Run it again after changing the camera.
            """)

    @Option(help: "Board profile: a file name in PROFILES/boards without .yaml, e.g. raspberry-pi-4.")
    var board: String

    @Option(help: "The config file to write.")
    var config = DoctorCommand.installedConfig

    @Option(help: "Folder of the package's default.yaml and boards/.")
    var profiles = "/usr/share/dashcam-agent"

    @Option(help: "Camera to use (default: the first capture device found, by its stable name).")
    var camera: String?

    @Flag(help: "Take the board's camera keys as they are, without looking for a camera (a card prepared before the camera is there).")
    var noCamera = false

    @Flag(help: "Print the file instead of writing it.")
    var dryRun = false

    @Flag(help: "Keep the profile's encoder.preference as it is, without trying each encoder here first.")
    var noEncoderCheck = false

    func run() async throws {
        let boards = Self.boards(in: profiles)
        guard boards.contains(board) else {
            var standardError = StandardError()
            let known = boards.isEmpty ? "none: no \(profiles)/boards/*.yaml" : boards.joined(separator: ", ")
            print("dashcam-agent: setup: no board profile '\(board)' (boards: \(known))", to: &standardError)
            throw ExitCode(64)
        }
        let setup: BoardSetup
        do {
            setup = try await Self.inputs(board: board, profiles: profiles, config: config)
        } catch {
            throw ExitStatus.report(error)
        }
        var chosen: BoardSetup.CameraChoice?
        var found: [String] = []
        let wanted = setup.merge().config.camera
        if wanted.source == .v4l2 && !noCamera {
            if let explicit = camera {
                let info: V4L2DeviceInfo
                do {
                    info = try V4L2Camera.describe(explicit)
                } catch {
                    throw ExitStatus.report(error)
                }
                chosen = BoardSetup.chooseFormat(for: wanted, on: info, device: explicit)
                found.append("\(explicit): \(info.card) [\(info.driver)], used")
            } else if setup.yours.contains("camera.device") {
                // The user named the camera: that one, if it is there now.
                do {
                    let info = try V4L2Camera.describe(wanted.device)
                    chosen = BoardSetup.chooseFormat(for: wanted, on: info, device: wanted.device)
                    found.append("\(wanted.device) (your camera.device): \(info.card) [\(info.driver)], used")
                } catch {
                    found.append("\(wanted.device) (your camera.device): \(error); size and rate not checked")
                }
            } else {
                // Every capture device by its stable name; other nodes (a UVC camera's metadata node) are left out.
                for path in CameraNames.capture() {
                    guard let info = try? V4L2Camera.describe(path) else { continue }
                    if chosen == nil {
                        chosen = BoardSetup.chooseFormat(for: wanted, on: info, device: path)
                        found.append("\(path): \(info.card) [\(info.driver)], used")
                    } else {
                        found.append("\(path): \(info.card) [\(info.driver)]; --camera \(path) takes it instead")
                    }
                }
            }
        }
        var outcome = setup.merge(camera: chosen)
        // Each encoder of the profile tried here, at the evidence's size and rate as merged: those
        // that keep up are kept (BoardSetup.chooseEncoders), unless encoder.preference is yours.
        var encoderNotes: [String] = []
        if !noEncoderCheck, !setup.yours.contains("encoder.preference") {
            var bench = EncoderBench(config: outcome.config)
            bench.seconds = 2
            let trials = await Doctor.offThePool { [bench] in bench.trials(of: .evidence) }
            let choice = BoardSetup.chooseEncoders(outcome.config.encoder.preference, trials: (try? trials.get()) ?? [])
            encoderNotes = choice.notes
            if let kept = choice.kept { outcome = setup.merge(camera: chosen, encoders: kept) }
        }
        let text = setup.render(outcome, version: ReleaseVersion.current)
        if dryRun {
            print(text, terminator: "")
            return
        }
        do {
            try write(text)
        } catch {
            var standardError = StandardError()
            print("dashcam-agent: setup: \(error)\(getuid() == 0 ? "" : " (run it with sudo)")", to: &standardError)
            throw ExitCode(ExitStatus.output)
        }
        print("setup: board \(board), \(config) written")
        print("camera:")
        if noCamera {
            print("  not looked for (--no-camera): \(outcome.config.camera.device)")
        } else if found.isEmpty {
            print("  none found: plug the camera in and run setup again; until then \(outcome.config.camera.device)")
        }
        for line in found { print("  \(line)") }
        for note in chosen?.notes ?? [] { print("  \(note)") }
        print("keys (the rest as the package has them):")
        for (key, source) in outcome.written where source != .package {
            let name = key.name + String(repeating: " ", count: max(1, 30 - key.name.count))
            print("  \(name)\(key.yaml(in: outcome.config) ?? "")  (\(source.rawValue))")
        }
        for line in outcome.overridden { print("  \(line)") }
        if !encoderNotes.isEmpty {
            print("encoders tried at \(outcome.config.videoFormat):")
            for note in encoderNotes { print("  \(note)") }
        }
        print("next: sudo dashcam-agent doctor, then sudo systemctl restart dashcam-agent")
    }

    /// Writes the file; a previous one different from it is kept beside it as `.before-setup`.
    private func write(_ text: String) throws {
        if let old = FileManager.default.contents(atPath: config), old != Data(text.utf8) {
            try ConfigFileWriter.replace(config + ".before-setup", with: String(decoding: old, as: UTF8.self), mode: 0o644)
        }
        try ConfigFileWriter.replace(config, with: text, mode: 0o644, keepMode: true)
    }

    static func boards(in profiles: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: profiles + "/boards")) ?? []
        return names.filter { $0.hasSuffix(".yaml") }.map { String($0.dropLast(5)) }.sorted()
    }

    /// The profile, the package's defaults and the current file, each checked as the agent checks a config.
    static func inputs(board: String, profiles: String, config: String) async throws -> BoardSetup {
        func file(_ path: String) async throws -> BoardSetup.File {
            BoardSetup.File(config: try await AgentConfig.load(file: path, environment: [:]), keys: try AgentConfig.keys(setIn: path))
        }
        let current: BoardSetup.File? = FileManager.default.fileExists(atPath: config) ? try await file(config) : nil
        let previous = FileManager.default.contents(atPath: config).map {
            BoardSetup.previousChoices(in: String(decoding: $0, as: UTF8.self))
        }
        return BoardSetup(
            board: board, profile: try await file("\(profiles)/boards/\(board).yaml"),
            shipped: try await file("\(profiles)/default.yaml"), current: current, previous: previous ?? [:])
    }
}

/// The V4L2 devices here, each by its most stable name: its /dev/v4l/by-id/ link, else its
/// /dev/v4l/by-path/ link (a camera with no serial, or not on USB), else /dev/videoN.
enum CameraNames {
    static func capture() -> [String] {
        let dev = "/dev"
        var names: [String: String] = [:]
        for folder in ["v4l/by-path", "v4l/by-id"] {
            let links = (try? FileManager.default.contentsOfDirectory(atPath: "\(dev)/\(folder)")) ?? []
            for link in links.sorted() {
                let path = "\(dev)/\(folder)/\(link)"
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) else { continue }
                let resolved = URL(fileURLWithPath: target, relativeTo: URL(fileURLWithPath: "\(dev)/\(folder)/")).standardizedFileURL.path
                // by-id after by-path: it wins. The first link of a folder per device is kept.
                if names[resolved]?.hasPrefix("\(dev)/\(folder)/") != true { names[resolved] = path }
            }
        }
        return ProbeCommand.videoDevices().map { names[$0] ?? $0 }
    }
}
