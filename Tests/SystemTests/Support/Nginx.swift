import Foundation
import TestSupport

/// Debian's nginx, started by a test in a folder of its own: the binary, the shipped site file,
/// and the main config that keeps every path nginx writes inside that folder.
enum Nginx {
    static let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// `deploy/nginx/guidance-server.conf` as shipped.
    static func shippedSite() throws -> String {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        return try String(contentsOf: repo.appendingPathComponent("deploy/nginx/guidance-server.conf"), encoding: .utf8)
    }

    /// A main config with `http` holding `body`, every temporary path, the pid file and the error
    /// log in `folder`.
    static func mainConfig(folder: URL, http body: String) -> String {
        let path = folder.path
        return """
            daemon off;
            pid \(path)/nginx.pid;
            error_log \(path)/error.log info;
            events { worker_connections 256; }
            http {
                client_body_temp_path \(path)/client_body;
                proxy_temp_path \(path)/proxy;
                fastcgi_temp_path \(path)/fastcgi;
                uwsgi_temp_path \(path)/uwsgi;
                scgi_temp_path \(path)/scgi;
            \(body)
            }

            """
    }

    /// The arguments that run nginx on `folder`'s `nginx.conf`.
    static func arguments(folder: URL) -> [String] {
        ["-p", folder.path, "-c", folder.appendingPathComponent("nginx.conf").path, "-e", folder.appendingPathComponent("error.log").path]
    }
}
