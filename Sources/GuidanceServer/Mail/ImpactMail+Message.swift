import Foundation
import GuidanceProtocol

extension ImpactMail {
    /// The mail about `job`'s clip, in plain English, its times in the owner's zone and language:
    /// which car (its name on the owner's pages), when, where (with a map link, if the clip has
    /// a GPS fix), the peak g, and the event's page.
    static func message(_ job: Job, settings: Settings, date: Date) -> MailMessage {
        let name = carName(job.recipient.carName, device: job.device)
        let stored = StoredClip(device: job.device, clip: job.clip, receivedAt: "", have: [])
        let car = OwnedDevice(device: job.device, label: name, pairedAtMs: 0, lastSeenAtMs: nil, recentGuidance: [])
        let row = OwnerPages.eventRow(stored, car: car, clock: job.recipient.clock)
        let origin = settings.publicOrigin ?? ""
        var lines = [
            "Your car \(name) recorded an impact while it was parked.",
            "",
            "When: \(row["time"] as? String ?? job.clip.at)"
        ]
        if let peak = row["peakG"] as? String { lines.append("Peak: \(peak)") }
        if let place = row["place"] as? String, let map = row["map"] as? String { lines.append("Where: \(place) (\(map))") }
        lines += [
            "",
            "See the recording: \(origin)\(eventPath(device: job.device, id: job.clip.id))",
            "",
            "You get this e-mail because you asked for it on your settings page (\(origin)/settings).",
            "At most \(settings.maxPerCarPerHour) such e-mails are sent per car an hour."
        ]
        return MailMessage(
            from: settings.from, to: job.recipient.address, subject: "Impact on your parked car \(name)",
            body: lines.joined(separator: "\n"), date: date, id: UUID().uuidString.lowercased())
    }

    /// `/events/<device>/<id>`, the device percent-encoded (a clip id has only safe characters).
    static func eventPath(device: String, id: String) -> String {
        let safe = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        return "/events/\(device.addingPercentEncoding(withAllowedCharacters: safe) ?? "_")/\(id)"
    }

    /// A car's name as a subject and a line may hold it: control characters (line ends above
    /// all) become spaces, at most 64 characters; the device id if nothing is left.
    static func carName(_ label: String, device: String) -> String {
        let cleaned = String(String.UnicodeScalarView(label.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
            .trimmingCharacters(in: .whitespaces)
        let name = String(cleaned.prefix(64))
        guard name.isEmpty else { return name }
        return String(
            String.UnicodeScalarView(device.unicodeScalars.prefix(64).map { $0.properties.generalCategory == .control ? "_" : $0 }))
    }
}
