public import Foundation
import Synchronization

/// A real HEVC segment, made once by the ffmpeg CLI (libx265) on a thread of its own: 2 s of
/// `testsrc2` at 320x180, 10 fps.
public enum SampleSegment {
    public static let available = FileManager.default.isExecutableFile(atPath: "/usr/bin/ffmpeg")

    private static let made = Task<Data, Never> {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("hosted-model-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try? await Command.executeAsync(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=10", "-t", "2", "-c:v", "libx265",
                "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-y", file.path
            ])
        return (try? Data(contentsOf: file)) ?? Data()
    }

    public static func data() async -> Data { await made.value }
}

extension SampleSegment {
    /// Real segments as the agent sends them, 5 s of `testsrc2` at 10 fps (50 frames), `size` big,
    /// HEVC in MP4: each `variant` another hue, so other bytes. Made once each, on first use.
    public static func clip(_ variant: Int = 0, size: String = "128x72") async -> [UInt8] {
        let key = "\(variant)-\(size)"
        let task = clips.withLock { clips in
            if let made = clips[key] { return made }
            let made = Task<[UInt8], Never> {
                let file = FileManager.default.temporaryDirectory.appendingPathComponent("clip-\(variant)-\(UUID().uuidString).mp4")
                defer { try? FileManager.default.removeItem(at: file) }
                _ = try? await Command.executeAsync(
                    "ffmpeg",
                    [
                        "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=10", "-t", "5", "-vf",
                        "hue=h=\(variant * 37 % 360)",
                        "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-y", file.path
                    ])
                return (try? [UInt8](Data(contentsOf: file))) ?? []
            }
            clips[key] = made
            return made
        }
        return await task.value
    }

    /// What every ``clip(_:)`` is: its header's `frames` and `durationMs`.
    public static let clipFrames = 50
    public static let clipDurationMs = 5000

    private static let clips = Mutex<[String: Task<[UInt8], Never>]>([:])
}

extension SampleSegment {
    /// ``clip(_:size:)``'s first clip, made on the calling thread (for code that cannot wait).
    public static let blockingClip: [UInt8] = {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("clip-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try? Command.execute(
            "ffmpeg",
            [
                "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=128x72:rate=10", "-t", "5",
                "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-y", file.path
            ])
        return (try? [UInt8](Data(contentsOf: file))) ?? []
    }()

    /// `clip` with an MP4 `free` box after it that holds `tag` and pads it to at least `bytes`:
    /// other bytes (and size) for each tag, the same video to any MP4 reader.
    public static func tagged(_ clip: [UInt8], _ tag: Int, bytes: Int = 0) -> [UInt8] {
        let payload = Array("tag \(tag)".utf8)
        let size = max(8 + payload.count, bytes - clip.count)
        var box = withUnsafeBytes(of: UInt32(size).bigEndian, Array.init) + Array("free".utf8) + payload
        box += [UInt8](repeating: 0, count: size - box.count)
        return clip + box
    }
}
