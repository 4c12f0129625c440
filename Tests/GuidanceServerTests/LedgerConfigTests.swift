import ConfigSupport
@testable import GuidanceServer
import Testing

/// The `ledger` key: where usage is kept, and what is refused.
@Suite struct LedgerConfigTests {
    static func location(_ value: String, environment: [String: String] = [:]) throws(ConfigError) -> ServerConfig.LedgerLocation {
        var config = ServerConfig()
        config.ledger = value
        return try config.ledgerLocation(environment: environment)
    }

    @Test func theDefaultIsAFileBesideTheServer() throws {
        #expect(ServerConfig().ledger == "sqlite:usage.sqlite")
        #expect(try Self.location(ServerConfig().ledger) == .sqlite(path: "usage.sqlite"))
    }

    @Test(arguments: [
        // systemd's StateDirectory= (several folders are separated by colons: the first is used).
        (
            "sqlite:usage.sqlite", ["STATE_DIRECTORY": "/var/lib/guidance-server"],
            ServerConfig.LedgerLocation.sqlite(path: "/var/lib/guidance-server/usage.sqlite")
        ),
        ("sqlite:ledger/u.db", ["STATE_DIRECTORY": "/var/lib/a:/var/lib/b"], .sqlite(path: "/var/lib/a/ledger/u.db")),
        ("sqlite:/srv/usage.sqlite", ["STATE_DIRECTORY": "/var/lib/guidance-server"], .sqlite(path: "/srv/usage.sqlite")),
        ("sqlite:usage.sqlite", [:], .sqlite(path: "usage.sqlite")),
        ("postgres://guidance@db.internal:5433/fleet", [:], .postgres(url: "postgres://guidance@db.internal:5433/fleet")),
        ("postgresql://guidance:secret@10.0.0.5/fleet", [:], .postgres(url: "postgresql://guidance:secret@10.0.0.5/fleet"))
    ])
    func accepted(value: String, environment: [String: String], expected: ServerConfig.LedgerLocation) throws {
        #expect(try Self.location(value, environment: environment) == expected)
    }

    @Test(arguments: [
        ("mysql://db/fleet", "ledger: 'mysql://db/fleet' is not allowed; expected sqlite:PATH (one server) or postgres://"),
        ("usage.sqlite", "ledger: 'usage.sqlite' is not allowed; expected sqlite:PATH"),
        ("", "ledger: '' is not allowed"),
        ("sqlite:", "ledger: 'sqlite:' is not allowed; expected sqlite:PATH with a file path"),
        (
            "postgres://db.internal",
            "ledger: 'postgres://db.internal' is not allowed; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
        ),
        ("postgres:///fleet", "ledger: 'postgres:///fleet' is not allowed"),
        // A malformed URL is shown without its password.
        ("postgres://fleet:s3cret@/", "ledger: 'postgres://fleet:***@/' is not allowed")
    ])
    func refused(value: String, message: String) {
        #expect {
            try Self.location(value)
        } throws: { error in
            (error as? ConfigError)?.key == "ledger" && "\(error)".hasPrefix(message)
        }
    }

    @Test(arguments: [
        ("postgres://fleet:s3cret@db:5432/usage", "postgres://fleet:***@db:5432/usage"),
        ("postgres://fleet@db/usage", "postgres://fleet@db/usage"),
        ("postgres://a:b@c@d/e", "postgres://a:***@d/e"),
        ("sqlite:/var/lib/u.sqlite", "sqlite:/var/lib/u.sqlite")
    ])
    func passwordsAreNeverShown(value: String, shown: String) {
        #expect(ServerConfig.redacted(value) == shown)
    }
}
