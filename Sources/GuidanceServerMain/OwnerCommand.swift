import ArgumentParser
import Foundation
import GuidanceServer
import Logging

struct OwnerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "owner",
        abstract: "Owner accounts of the web pages, where owners pair their cars and buy usage.",
        subcommands: [Add.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make an account for EMAIL and print a one-time link to set its password (valid 24 hours).",
            discussion:
                "With an address that has an account, prints a new link for it (a forgotten password). Needs pairing.enabled and a SQLite ledger."
        )
        @OptionGroup var options: ConfigOptions
        @Argument(help: "The owner's email address: what they sign in with.")
        var email: String
        @Option(help: "The name the car says when it is paired (\"Paired with the account of NAME\"); the address's local part if unset.")
        var name: String?

        func validate() throws {
            let email = self.email.trimmingCharacters(in: .whitespaces).lowercased()
            guard email.count <= 254, email.split(separator: "@").count == 2, !email.hasPrefix("@"), !email.hasSuffix("@"),
                !email.contains(where: \.isWhitespace)
            else {
                throw ValidationError("EMAIL must be an address like ana@example.org, not '\(self.email)'")
            }
            if let name, name.isEmpty || name.count > 64 { throw ValidationError("--name must be 1 to 64 characters") }
        }

        func run() async throws {
            let config = try await options.load()
            guard config.pairing.enabled else { fail("owner accounts need pairing.enabled: true", exit: 78) }
            let email = self.email.trimmingCharacters(in: .whitespaces).lowercased()
            let name = self.name ?? String(email.split(separator: "@")[0])
            let link = try await options.withLedger(config) { ledger in
                guard let pairing = try await config.openPairing(logger: Logger(label: "guidance-server"), ledger: ledger),
                    let owners = pairing.owners
                else { fail("owner accounts need pairing.enabled: true", exit: 78) }
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let owner: Int64
                if let id = try await owners.createOwner(email: email, displayName: name, nowMs: now) {
                    owner = id
                } else if let existing = try await owners.account(email: email) {
                    owner = existing.owner.id
                } else {
                    throw LedgerError.unavailable("could not add \(email)")
                }
                let link = try await OwnerLinks.passwordLink(owner: owner, store: owners, base: config.pagesBaseURL, nowMs: now)
                try await owners.shutdown()
                return link
            }
            print(link)
        }
    }
}
