public import ConfigSupport
public import Foundation
public import Logging
public import ServiceLifecycle
import Hummingbird

extension ServerConfig {
    /// Where `ledger` says usage is kept.
    public enum LedgerLocation: Sendable, Equatable {
        /// A file, for one server.
        case sqlite(path: String)
        /// A PostgreSQL database shared by several instances.
        case postgres(url: String)
    }

    /// `ledger` read: `sqlite:PATH` (a relative PATH is taken from `$STATE_DIRECTORY`, which
    /// systemd's `StateDirectory=` sets, else from the working directory) or `postgres://…`.
    public func ledgerLocation(environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> LedgerLocation {
        // An error shows the value without its password.
        let shown = Self.redacted(ledger)
        if ledger.hasPrefix("sqlite:") {
            let path = String(ledger.dropFirst("sqlite:".count))
            guard !path.isEmpty else {
                throw .invalidOption("ledger", shown, "sqlite:PATH with a file path, or postgres://USER@HOST:PORT/DATABASE")
            }
            return .sqlite(path: Self.inStateDirectory(path, environment: environment))
        }
        if ledger.hasPrefix("postgres://") || ledger.hasPrefix("postgresql://") {
            guard let url = URL(string: ledger), url.host != nil, url.path.count > 1 else {
                throw .invalidOption("ledger", shown, "postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
            }
            return .postgres(url: ledger)
        }
        throw .invalidOption("ledger", shown, "sqlite:PATH (one server) or postgres://USER@HOST:PORT/DATABASE (several)")
    }

    /// `path`, or for a relative one, `path` in `$STATE_DIRECTORY` (systemd's `StateDirectory=`)
    /// when it is set: where the server's own files live.
    public static func inStateDirectory(_ path: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if path.hasPrefix("/") { return path }
        let base = environment["STATE_DIRECTORY"].flatMap { $0.split(separator: ":").first.map(String.init) }
        return base.map { URL(fileURLWithPath: $0).appendingPathComponent(path).path } ?? path
    }

    /// `value` with the password of a `scheme://user:password@…` URL replaced by `***`, well-formed
    /// or not: for errors and logs.
    public static func redacted(_ value: String) -> String {
        guard let scheme = value.range(of: "://") else { return value }
        let rest = value[scheme.upperBound...]
        // The authority ends at the first '/' after the last '@' (a password may hold '/' or '@').
        guard let at = rest.lastIndex(of: "@") else { return value }
        let userinfo = rest[..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return value }
        return String(value[..<userinfo.index(after: colon)]) + "***" + String(rest[at...])
    }

    /// Opens the ledger (and, for PostgreSQL, the shared leases), with the services that must run
    /// beside the server for them.
    public func openLedger(logger: Logger) async throws -> (ledger: any UsageLedger, leases: any SessionLeases, services: [any Service]) {
        switch try ledgerLocation() {
        case .sqlite(let path):
            return (
                try await SQLiteLedger.open(path: path, logger: logger), LocalLeases(),
                [SQLiteLedger.Checkpoints(path: path, logger: logger)]
            )
        case .postgres(let url):
            let store = try PostgresStore(url: url, logger: logger)
            return (store.ledger, store.leases, store.services)
        }
    }

    /// The ledger alone, for an operator command (`credit`, `usage`): no leases, and for
    /// PostgreSQL only the client's pool to run (no lease listener).
    public func openUsageLedger(logger: Logger) async throws -> (ledger: any UsageLedger, services: [any Service]) {
        switch try ledgerLocation() {
        case .sqlite(let path):
            return (try await SQLiteLedger.open(path: path, logger: logger), [])
        case .postgres(let url):
            let store = try PostgresStore(url: url, logger: logger)
            return (store.ledger, store.ledgerServices)
        }
    }

    /// Pairing as `pairing.*` configures it, or `nil` when it is off. Pairings live in the ledger's
    /// database; the signing key file is created (0600) with a random key the first time.
    /// `ledger`: the open ledger, whose PostgreSQL client pairing shares (running beside it).
    public func openPairing(logger: Logger, ledger: (any UsageLedger)? = nil) async throws -> Pairing? {
        guard pairing.enabled else { return nil }
        let store: any PairingStore & OwnerStore
        let sessions: any PersistDriver
        switch try ledgerLocation() {
        case .sqlite(let path):
            let sqlite = try await SQLitePairingStore.open(path: path, logger: logger)
            (store, sessions) = (sqlite, SQLiteSessionDriver(store: sqlite))
        case .postgres:
            guard let postgres = ledger as? PostgresLedger else {
                throw LedgerError.unavailable("pairing with a PostgreSQL ledger needs the ledger open")
            }
            let pg = PostgresPairingStore(ledger: postgres)
            (store, sessions) = (pg, PostgresSessionDriver(store: pg))
        }
        let key = try SigningKey.load(Self.inStateDirectory(pairing.signingKeyFile), key: "pairing.signingKeyFile")
        var setup = Pairing(
            store: store, tokens: AccessTokens(key: key, lifetimeSeconds: Int64(pairing.accessTokenSeconds)),
            verificationURI: pairing.verificationURI)
        setup.scheme = server.usesTLS ? "https" : "http"
        setup.refreshLifetimeMs = Int64(pairing.refreshTokenDays) * 86_400_000
        setup.owners = store
        var site = OwnerSite(library: try await OwnerTemplates.library(), sessionDriver: sessions)
        site.allowance = usage.remainingSeconds
        // Impact mails need a relay and the clips they tell of (``makeImpactMail``).
        site.mailRelay = mail.relay != nil && clips.dir != nil
        // Cookies are Secure when the pages are reached over HTTPS: this server's TLS, or a proxy's
        // whose public address is the configured one (each request forwarded by a local proxy
        // with X-Forwarded-Proto: https is also, per request: SecureTransport).
        site.secureCookies = server.usesTLS || pairing.verificationURI?.lowercased().hasPrefix("https://") == true
        site.products = try payments.products.map { text throws(ConfigError) in
            guard let product = Product(text) else {
                throw .invalidOption("payments.products", text, "NAME=SECONDS=PRICE, e.g. `1 hour=3600=4.99 EUR` (1 to 100000000 seconds)")
            }
            return product
        }
        switch payments.provider {
        case .none:
            break
        case .simulated:
            let secret = try SigningKey.load(
                Self.inStateDirectory(payments.webhookSecretFile), key: "payments.webhookSecretFile",
                holding: "the secret payment webhooks are signed with")
            site.provider = SimulatedProvider(secret: secret)
            logger.warning(
                "payments.provider is simulated: a signed-in owner can credit usage without paying; for demos only (set payments.provider: none, or a real provider, in production)"
            )
        }
        setup.site = site
        return setup
    }
}
