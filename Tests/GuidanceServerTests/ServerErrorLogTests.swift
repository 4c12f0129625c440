@testable import GuidanceServer
import Hummingbird
import HummingbirdTesting
import InMemoryLogging
import Logging
import Testing

/// Every 5xx writes one error line that names the path (not the query) and the cause, and the
/// lines a storm of them would make are held to one a second.
@Suite struct ServerErrorLogTests {
    struct Locked: Error, CustomStringConvertible { var description: String { "database is locked" } }

    @Test func everyServerErrorIsLoggedWithItsPathAndCauseOncePerSecond() async throws {
        let log = InMemoryLogHandler()
        let logger = Logger(label: "errors") { _ in log }
        let metrics = ServerMetrics()
        let router = Router()
        // One instant for every request: "the same second" whatever the machine's load.
        router.add(middleware: ServerErrorLog(logger: logger, metrics: metrics, limit: LogLimit(now: { 1_000_000_000 })))
        router.post("/signin") { _, _ -> String in throw Locked() }
        router.get("/busy") { _, _ in Response(status: .serviceUnavailable) }
        router.get("/fine") { _, _ in "ok" }
        try await Application(router: router).test(.router) { client in
            let failed = try await client.execute(uri: "/signin?token=secret-token", method: .post)
            #expect(failed.status == .internalServerError)
            // The same second: left out of the log, still counted.
            _ = try await client.execute(uri: "/busy", method: .get)
            #expect(try await client.execute(uri: "/fine", method: .get).status == .ok)
        }
        let errors = log.entries.filter { $0.level == .error }.map { "\($0.message)" }
        #expect(errors.count == 1, "\(errors)")
        #expect(errors.first?.contains("POST /signin answered 500: database is locked") == true, "\(errors)")
        #expect(!errors.joined().contains("secret-token"))
        #expect(metrics.exposition().contains("guidance_http_server_errors_total 2"), "\(metrics.exposition())")
    }
}

/// Whom tries are counted against: an IPv6 client by its /64, an IPv4 one as it is.
@Suite struct ClientAddressTests {
    @Test func anIPv6ClientCountsByItsSlash64() {
        #expect(OwnerPages.bucket("2001:db8:66:1::5") == "2001:db8:66:1::/64")
        #expect(OwnerPages.bucket("2001:db8:66:1:ffff:1:2:3") == OwnerPages.bucket("2001:db8:66:1::9"))
        #expect(OwnerPages.bucket("2001:db8:66:2::5") != OwnerPages.bucket("2001:db8:66:1::5"))
        #expect(OwnerPages.bucket("::ffff:198.51.100.7") == "198.51.100.7")
        #expect(OwnerPages.bucket("198.51.100.7") == "198.51.100.7")
        #expect(OwnerPages.bucket("not an address") == "not an address")
    }
}
