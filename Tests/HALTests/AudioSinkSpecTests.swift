import Foundation
import HAL
import Logging
import Testing

@Suite struct AudioSinkSpecTests {
    @Test func alsaAloneIsTheDefaultDevice() throws {
        #expect(try AudioSinkSpec(parsing: "alsa") == .alsa(device: "default"))
    }

    @Test func everythingAfterTheFirstColonIsTheDeviceOrFolder() throws {
        #expect(try AudioSinkSpec(parsing: "alsa:hw:1,0") == .alsa(device: "hw:1,0"))
        #expect(try AudioSinkSpec(parsing: "alsa:plughw:CARD=Loopback,DEV=0") == .alsa(device: "plughw:CARD=Loopback,DEV=0"))
        #expect(try AudioSinkSpec(parsing: "wav:out/speech") == .wav(directory: "out/speech"))
        #expect(AudioSinkSpec.alsa(device: "hw:1,0").description == "alsa:hw:1,0")
    }

    @Test(arguments: ["", "alsa:", "wav", "wav:", "pulse", "pulse:default", "ALSA", " alsa"])
    func anythingElseIsAnErrorNamingTheValueAndWhatIsAllowed(_ text: String) {
        #expect {
            _ = try AudioSinkSpec(parsing: text)
        } throws: { error in
            guard let error = error as? AudioSinkError else { return false }
            let description = "\(error)"
            return error.isInvalidSpec && description.contains("'\(text)'") && description.contains("alsa:DEVICE")
                && description.contains("wav:DIRECTORY")
        }
    }
}
