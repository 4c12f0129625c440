import Foundation
import HAL
import Logging
import Testing

@Suite struct ALSASinkTests {
    @Test(arguments: ["dashcam_no_such_pcm", "hw:97,0"])
    func aDeviceThatDoesNotExistIsAnErrorNamingIt(_ device: String) {
        let sink = ALSASink(device: device)
        #expect {
            try sink.open(sampleRate: 22_050)
        } throws: { error in
            "\(error)".contains("'\(device)'")
        }
    }

    @Test func anUnknownPCMNameIsNotFound() throws {
        let error = try #require(throws: AudioSinkError.self) {
            try ALSASink(device: "dashcam_no_such_pcm").open(sampleRate: 22_050)
        }
        #expect(error.isNotFound)
        #expect(error.subject == "dashcam_no_such_pcm")
    }

    /// alsa-lib's `null` device takes everything at once and plays nothing; no sound card needed.
    /// Each call either works or names its error: an utterance cut off leaves the device ready for
    /// the next, and writing after `close` is refused, not a crash.
    @Test func theNullDeviceTakesUtterancesDrainedAndDropped() throws {
        let sink = ALSASink(device: "null")
        try sink.open(sampleRate: 22_050)
        var finished: [String] = []
        for cutOff in [false, true, false] {
            try sink.begin(voice: "en")
            for _ in 0..<10 { try sink.write(ArraySlice(repeating: 100, count: 441)) }
            if cutOff { sink.stop(); finished.append("stopped") } else { try sink.drain(); finished.append("drained") }
        }
        #expect(finished == ["drained", "stopped", "drained"])
        sink.close()
        sink.close()
        #expect(throws: (any Error).self, "a closed sink takes no samples") { try sink.write(ArraySlice(repeating: 100, count: 441)) }
    }

    @Test func aSpeakerPlaysToTheNullDevice() async throws {
        let speaker = try Speaker(
            synthesizer: FakeSynthesizer(), sink: ALSASink(device: "null"),
            logger: Logger(label: "alsa-tests"))
        speaker.say(text: "A/200", voice: "en")
        await speaker.waitUntilIdle()
        speaker.say(text: "B/200", voice: "en")
        await speaker.waitUntilIdle()
        #expect(speaker.stats.spoken == 2)
        #expect(speaker.stats.failures == 0)
    }

    @Test func aSpeakerOnAMissingDeviceFailsToStartNamingIt() {
        #expect {
            _ = try Speaker(
                synthesizer: FakeSynthesizer(), sink: ALSASink(device: "dashcam_no_such_pcm"),
                logger: Logger(label: "alsa-tests"))
        } throws: { error in
            "\(error)".contains("'dashcam_no_such_pcm'")
        }
    }
}
