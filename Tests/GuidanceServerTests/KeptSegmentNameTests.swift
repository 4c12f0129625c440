@testable import GuidanceServer
import Testing

/// Where `server.keepDir` puts a segment: a name per device, stream and seq, safe as a file name.
@Suite struct KeptSegmentNameTests {
    @Test(arguments: [
        ("car-1", "run-1", 7, "car-1-run-1-000007.mp4"),
        // A restart of the agent is another stream: its seq 7 is another file.
        ("car-1", "run-2", 7, "car-1-run-2-000007.mp4"),
        // The whole seq, however big.
        ("car-1", "run-1", 12_345_678_901, "car-1-run-1-12345678901.mp4"),
        // A client's stream id cannot name a path.
        ("car-1", "../../etc/passwd", 1, "car-1-.._.._etc_passwd-000001.mp4"),
        ("car-1", "session:3F2A", 1, "car-1-session_3F2A-000001.mp4"),
        ("car-1", "ü\n", 1, "car-1-__-000001.mp4")
    ])
    func namesEachSegmentOnce(device: String, stream: String, seq: Int, name: String) {
        #expect(StreamSession.keptName(device: device, stream: stream, seq: seq) == name)
    }
}
