public import Foundation

/// A real HEVC segment, made once by the ffmpeg CLI (libx265) on a thread of its own: 2 s of
/// `testsrc2` at 320x180, 10 fps.
public enum SampleSegment {
    public static let available = FileManager.default.isExecutableFile(atPath: "/usr/bin/ffmpeg")

    private static let made = Task<Data, Never> {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("hosted-model-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        _ = try? await Command.executeAsync("ffmpeg", [
            "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=10", "-t", "2", "-c:v", "libx265",
            "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-y", file.path,
        ])
        return (try? Data(contentsOf: file)) ?? Data()
    }

    public static func data() async -> Data { await made.value }
}
