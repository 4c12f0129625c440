public import Foundation
import Glibc

/// A certificate authority made for one test, a server certificate it signed for a host name
/// (and 127.0.0.1), and a private token file: TLS that the system's trust store refuses and
/// `uplink.caFile` accepts.
public struct TestCredentials: Sendable {
    public let folder: URL
    public var ca: String { folder.appendingPathComponent("ca.pem").path }
    public var cert: String { folder.appendingPathComponent("server.pem").path }
    public var key: String { folder.appendingPathComponent("server.key").path }
    public var token: String { folder.appendingPathComponent("token").path }

    /// Made by openssl in a new temporary folder; the caller removes ``folder``.
    public static func make(host: String = "localhost") throws -> TestCredentials {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let c = TestCredentials(folder: folder)
        let san = folder.appendingPathComponent("san.cnf").path
        try "subjectAltName=DNS:\(host),IP:127.0.0.1\n".write(toFile: san, atomically: true, encoding: .utf8)
        let csr = folder.appendingPathComponent("server.csr").path
        let caKey = folder.appendingPathComponent("ca.key").path
        for arguments in [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", c.ca, "-days", "1", "-subj", "/CN=dashcam test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", c.key, "-out", csr, "-subj", "/CN=\(host)"],
            ["x509", "-req", "-in", csr, "-CA", c.ca, "-CAkey", caKey, "-CAcreateserial", "-out", c.cert, "-days", "1", "-extfile", san]
        ] {
            let result = try Command.execute("openssl", arguments)
            guard result.status == 0 else { throw Command.Failure(description: "openssl \(arguments[0]): \(result.stderr)") }
        }
        try "t0k3n\n".write(toFile: c.token, atomically: true, encoding: .utf8)
        chmod(c.token, 0o600)
        return c
    }
}
