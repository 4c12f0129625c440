import Foundation
import TestSupport

/// One browser at the owners' pages of a running `guidance-server`, as curl: its own cookie jar,
/// the CSRF value of the last page it was shown, and (behind the server's trusted loopback proxy
/// rule) the client address it claims in `X-Real-IP`.
struct OwnerBrowser: Sendable {
    let base: String
    let jar: URL
    /// `X-Real-IP` sent with every request (the server takes it from a loopback peer only).
    var address: String?
    /// More curl arguments (`--cacert`, `--resolve`), for a server behind a TLS proxy.
    var curlOptions: [String] = []

    struct Page: Sendable {
        let status: Int
        /// Header lines of the answer, as sent (`Name: value`).
        let headers: [String]
        let body: String

        /// The values of every header called `name`, in order.
        func header(_ name: String) -> [String] {
            headers.compactMap { line in
                guard let colon = line.firstIndex(of: ":"), line[..<colon].lowercased() == name.lowercased() else { return nil }
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }

        /// The value of the page's first hidden `name` field.
        func field(_ name: String) -> String? {
            guard let start = body.range(of: "name=\"\(name)\" value=\"") else { return nil }
            let rest = body[start.upperBound...]
            return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }

        var location: String? { header("Location").first }
    }

    init(port: Int, address: String? = nil, scheme: String = "http", host: String = "127.0.0.1") {
        base = "\(scheme)://\(host):\(port)"
        jar = FileManager.default.temporaryDirectory.appendingPathComponent("jar-\(UUID().uuidString)")
        self.address = address
    }

    func get(_ path: String, headers: [String] = []) async throws -> Page {
        try await request(["-X", "GET"], path, headers: headers)
    }

    func post(_ path: String, _ form: [String: String], headers: [String] = []) async throws -> Page {
        let body = form.sorted { $0.key < $1.key }.map { "\(Self.encode($0.key))=\(Self.encode($0.value))" }.joined(separator: "&")
        return try await request(
            ["-X", "POST", "-H", "Content-Type: application/x-www-form-urlencoded", "--data-binary", body], path,
            headers: headers)
    }

    /// A form sent from the page it is on: the page's CSRF value with `form`.
    func submit(_ path: String, from page: Page, _ form: [String: String]) async throws -> Page {
        try await post(path, form.merging(["csrf": page.field("csrf") ?? ""]) { a, _ in a })
    }

    /// Signs in through the form; the answer (303 to `/` when it worked).
    func signIn(_ email: String, _ password: String) async throws -> Page {
        let form = try await get("/signin")
        return try await submit("/signin", from: form, ["email": email, "password": password])
    }

    /// Sets a password from a one-time link (`…/set-password?token=…`).
    func setPassword(link: String, _ password: String) async throws -> Page {
        let path = String(link[try require(link.range(of: "/set-password"), "not a link: \(link)").lowerBound...])
        let form = try await get(path)
        return try await submit("/set-password", from: form, ["token": form.field("token") ?? "", "password": password, "again": password])
    }

    /// The session cookie's value in the jar, if signed in.
    var sessionCookie: String? {
        let text = (try? String(contentsOf: jar, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            if fields.count >= 7, fields[5] == "session" { return String(fields[6]) }
        }
        return nil
    }

    private func request(_ method: [String], _ path: String, headers: [String]) async throws -> Page {
        let head = FileManager.default.temporaryDirectory.appendingPathComponent("head-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: head) }
        var arguments =
            ["-sS", "-D", head.path, "-b", jar.path, "-c", jar.path, "-w", "\n%{http_code}", "--max-time", "60"] + curlOptions + method
        for header in headers + (address.map { ["X-Real-IP: \($0)"] } ?? []) { arguments += ["-H", header] }
        arguments.append(base + path)
        let result = try await Command.executeAsync("/usr/bin/curl", arguments)
        guard result.status == 0 else { throw Command.Failure(description: "curl \(path): \(result.stderr)") }
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? -1
        let headLines = ((try? String(contentsOf: head, encoding: .utf8)) ?? "").split(separator: "\r\n").map(String.init)
        return Page(status: status, headers: headLines, body: lines.joined(separator: "\n"))
    }

    static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }
}

private func require<T>(_ value: T?, _ message: String) throws -> T {
    guard let value else { throw Command.Failure(description: message) }
    return value
}
