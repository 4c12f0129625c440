import ConfigSupport
import Foundation
import Glibc
import Logging
import NIOSSL

extension ServerConfig {
    /// `mail.*` checked together: a relay needs a sender, a user name a password.
    func validateMail() throws(ConfigError) {
        if let relay = mail.relay, Self.relayAddress(relay) == nil {
            throw .invalidOption(
                "mail.relay", relay, "HOST:PORT of an SMTP relay, such as smtp.example.org:587 or [2001:db8::25]:25 (port 1 to 65535)")
        }
        if let from = mail.from, !MailMessage.isAddress(from) {
            throw .invalidOption("mail.from", from, "a plain address such as dashcam@example.org (printable ASCII, one @, no spaces or <>)")
        }
        if mail.relay != nil, mail.from == nil {
            throw .missingKey("mail.from", reason: "mail.relay is set; set it to the address mails come from, such as dashcam@example.org")
        }
        if let username = mail.username, username.isEmpty || !MailMessage.isHeaderSafe(username) {
            throw .invalidOption("mail.username", username, "a user name without control characters")
        }
        switch (mail.username, mail.passwordFile) {
        case (.some, nil):
            throw .missingKey("mail.passwordFile", reason: "mail.username is set; the relay's password goes in a file (mode 0600)")
        case (nil, .some): throw .missingKey("mail.username", reason: "mail.passwordFile is set; AUTH needs a user name too")
        default: break
        }
    }

    /// `HOST:PORT` (`[IPv6]:PORT`) read; nil if it is not one.
    static func relayAddress(_ text: String) -> SMTPClient.Relay? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65_535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
            guard SMTPClient.isAddress(host) else { return nil }
        } else if host.contains(":") {
            return nil
        }
        guard !host.isEmpty, host.utf8.count <= 253,
            host.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || ".-:".unicodeScalars.contains($0)) })
        else { return nil }
        return SMTPClient.Relay(host: host, port: port)
    }

    /// The impact mails `mail.*` configure, or nil without a relay (or without owners or clips to
    /// tell of: logged). The password and CA files are configuration, read first: a problem is a
    /// ``ConfigError``.
    func makeImpactMail(clips: (any ClipStore)?, pairing: Pairing?, logger: Logger) throws(ConfigError) -> ImpactMail? {
        guard let relayText = mail.relay, let relay = Self.relayAddress(relayText), let from = mail.from else { return nil }
        var credentials: (username: String, password: String)?
        if let username = mail.username, let file = mail.passwordFile {
            let text = try PrivateFile.read(file, key: "mail.passwordFile", holding: "the mail relay's password")
            let password =
                text.split(separator: "\n", omittingEmptySubsequences: false).first.map {
                    $0.hasSuffix("\r") ? String($0.dropLast()) : String($0)
                } ?? ""
            guard !password.isEmpty, !password.contains("\0") else {
                throw .invalidOption("mail.passwordFile", file, "a file whose first line is the relay's password")
            }
            credentials = (username, password)
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if let caFile = mail.caFile {
            do {
                tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
            } catch {
                throw .invalidOption(
                    "mail.caFile", caFile, "a readable PEM file of the CA certificate(s) the relay's certificate is signed by (\(error))")
            }
        }
        guard let owners = pairing?.owners else {
            logger.warning("mail.relay is set and pairing.enabled is not: no car has an owner to tell, so no impact mail is sent")
            return nil
        }
        guard let clips else {
            logger.warning("mail.relay is set and clips.dir is not: no parked car's clip comes in, so no impact mail is sent")
            return nil
        }
        let origin = OwnerPages.origin(of: pairing?.verificationURI)
        if origin == nil {
            logger.warning("pairing.verificationURI is unset: the links in impact mails are paths without the server's address")
        }
        logger.notice(
            "impact mails go through \(relayText) (STARTTLS \(mail.starttls.rawValue), at most \(mail.maxPerCarPerHour) per car an hour)")
        return ImpactMail(
            settings: .init(
                relay: relay, from: from, startTLS: mail.starttls, credentials: credentials, tls: tls,
                timeout: .milliseconds(mail.timeoutMs), maxPerCarPerHour: mail.maxPerCarPerHour, ehloName: Self.ehloName(),
                publicOrigin: origin),
            owners: owners, clips: clips, logger: logger)
    }

    /// This machine's name for EHLO, if it is a plain host name; else `localhost`.
    static func ehloName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard !name.isEmpty,
            name.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || ".-".unicodeScalars.contains($0)) })
        else { return "localhost" }
        return name
    }
}
