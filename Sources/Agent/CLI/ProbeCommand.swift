import ArgumentParser
import FFmpegLog
import Foundation
import HAL
import Logging

struct ProbeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "probe",
        abstract: "List V4L2 cameras with their formats, sizes and rates, and the HEVC encoders that open here."
    )

    @Option(help: "Devices to describe (default: every /dev/video*).")
    var device: [String] = []

    @Option(help: "Encoders to try.")
    var encoder: [String] = AgentConfig().encoder.preference

    @Flag(help: "Print JSON instead of text.")
    var json = false

    func run() async throws {
        // FFmpeg's own errors (an encoder that does not open says why) on standard error in the
        // agent's log format; its warnings and chatter not at all. Standard output is the report's.
        FFmpegLog.route(level: .error)
        let paths = device.isEmpty ? Self.videoDevices() : device
        var cameras: [V4L2DeviceInfo] = []
        var problems: [String: String] = [:]
        for path in paths {
            do {
                cameras.append(try V4L2Camera.describe(path))
            } catch {
                problems[path] = "\(error)"
            }
        }
        let format = VideoFormat(width: 640, height: 360, fps: 10)
        let encoders: [(String, String?)] = encoder.map { name in
            // Whether it opens at all: HEVC for the one stream or the guidance copy, H.264 for evidence.
            let settings = EncoderSettings(
                preference: [name], rateControl: .crf(28), format: format, keyframeInterval: 50,
                codecs: [.hevc, .h264])
            do {
                _ = try LibavEncoder(settings: settings, inputFormat: .yuv420p)
                return (name, nil)
            } catch let error as EncoderError {
                return (name, error.attempts.first?.reason ?? error.detail)
            } catch {
                return (name, "\(error)")
            }
        }
        if json {
            let report = Report(
                cameras: cameras, notCameras: problems,
                encoders: encoders.map { Report.Encoder(name: $0.0, opens: $0.1 == nil, reason: $0.1) })
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
            return
        }
        print("Cameras:")
        if cameras.isEmpty && problems.isEmpty { print("  none found (no /dev/video*)") }
        for camera in cameras {
            print("  \(camera.path): \(camera.card) [\(camera.driver), \(camera.bus)]")
            for format in camera.formats {
                print("    \(format.fourcc) \(format.description)\(format.emulated ? " (converted by libv4l2)" : "")")
                for size in format.sizes {
                    let rates = size.fps.map { $0.rounded() == $0 ? String(Int($0)) : String(format: "%.2f", $0) }
                    print("      \(size.width)x\(size.height)  fps: \(rates.joined(separator: ", "))")
                }
            }
        }
        for (path, problem) in problems.sorted(by: { $0.key < $1.key }) { print("  \(path): \(problem)") }
        print("HEVC encoders (640x360@10):")
        for (name, reason) in encoders {
            print("  \(name): " + (reason.map { "does not open: \($0)" } ?? "opens"))
        }
    }

    static func videoDevices() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/dev")) ?? []
        return names.filter { $0.hasPrefix("video") }
            .sorted { $0.count == $1.count ? $0 < $1 : $0.count < $1.count }
            .map { "/dev/" + $0 }
    }

    private struct Report: Encodable {
        struct Encoder: Encodable {
            var name: String
            var opens: Bool
            var reason: String?
        }
        var cameras: [V4L2DeviceInfo]
        var notCameras: [String: String]
        var encoders: [Encoder]
    }
}
