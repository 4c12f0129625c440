import Foundation
import Glibc
import TestSupport

/// A real SMTP server on loopback: Debian's aiosmtpd (`python3-aiosmtpd`), run by the system's
/// Python, with a certificate for STARTTLS (`require_starttls`: nothing is taken before it) or
/// none (it offers no STARTTLS), and optionally AUTH PLAIN for one user (only over TLS). Each
/// message it takes is a JSON line on its stdout: envelope, subject decoded, body as text.
final class SMTPRelay: @unchecked Sendable {
    let process: Spawned
    let port: Int
    let folder: URL

    struct Received: Decodable, Equatable {
        var from: String
        var to: [String]
        var subject: String
        var body: String
        var auth: String?
    }

    static let script = #"""
        import argparse, asyncio, email, email.policy, json, ssl, sys
        from aiosmtpd.smtp import SMTP, AuthResult

        parser = argparse.ArgumentParser()
        parser.add_argument("--cert")
        parser.add_argument("--key")
        parser.add_argument("--user")
        parser.add_argument("--password")
        args = parser.parse_args()

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
                body = message.get_body(("plain",))
                print(json.dumps({
                    "from": envelope.mail_from, "to": envelope.rcpt_tos, "subject": str(message["subject"]),
                    "body": body.get_content() if body is not None else "",
                    "auth": session.auth_data.login.decode() if session.authenticated else None,
                }), flush=True)
                return "250 2.0.0 taken"

        def authenticate(server, session, envelope, mechanism, data):
            ok = mechanism == "PLAIN" and data.login.decode() == args.user and data.password.decode() == args.password
            return AuthResult(success=ok, auth_data=data)

        async def main():
            context = None
            if args.cert:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(args.cert, args.key)
            def session():
                extra = {"authenticator": authenticate, "auth_require_tls": True} if args.user else {}
                return SMTP(Handler(), hostname="relay.test", tls_context=context, require_starttls=context is not None, **extra)
            server = await asyncio.get_running_loop().create_server(session, "127.0.0.1", 0)
            print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
            await server.serve_forever()

        asyncio.run(main())
        """#

    /// `certificate`: STARTTLS with it (and its key); nil: no STARTTLS offered.
    init(certificate: (cert: String, key: String)?, user: (name: String, password: String)? = nil) async throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("smtp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let script = folder.appendingPathComponent("relay.py")
        try Self.script.write(to: script, atomically: true, encoding: .utf8)
        var arguments = [script.path]
        if let certificate { arguments += ["--cert", certificate.cert, "--key", certificate.key] }
        if let user { arguments += ["--user", user.name, "--password", user.password] }
        // Debian's Python, where python3-aiosmtpd is installed (not one earlier on PATH).
        process = try Spawned("/usr/bin/python3", arguments, folder: folder, absolute: true)
        var port: Int?
        await process.wait(for: .seconds(60)) { spawned in
            port = spawned.wholeLines.first.flatMap { try? JSONDecoder().decode([String: Int].self, from: Data($0.utf8))["port"] }
            return port != nil || !spawned.process.isRunning
        }
        guard let port else {
            throw Failure(
                description: "aiosmtpd did not start (python3-aiosmtpd installed? scripts/install-deps.sh): \(process.stderr.suffix(2000))")
        }
        self.port = port
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The messages taken so far.
    var received: [Received] {
        process.wholeLines.dropFirst().compactMap { try? JSONDecoder().decode(Received.self, from: Data($0.utf8)) }
    }

    /// Killed: it keeps nothing (and a SIGTERM may find the signal blocked, as the test runner
    /// left it).
    func stop() {
        process.stop(SIGKILL)
        try? FileManager.default.removeItem(at: folder)
    }
}
