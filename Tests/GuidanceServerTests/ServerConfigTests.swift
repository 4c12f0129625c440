import ConfigSupport
import Foundation
@testable import GuidanceServer
import TestSupport
import Testing

/// `ServerConfig` on the shared ConfigSupport machinery: same conventions as the agent, prefix `GUIDANCE_`.
@Suite struct ServerConfigTests {
    /// The repository's device-config/, found from this file so the tests run from any directory.
    static let deviceConfig = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("device-config")

    /// Loads `yaml` from a temporary file (none if nil).
    func load(
        yaml: String? = nil, environment: [String: String] = [:], overrides: [String: String] = [:]
    ) async throws -> ServerConfig {
        guard let yaml else {
            return try await ServerConfig.load(file: nil, environment: environment, overrides: overrides)
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("server-config-\(UUID()).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            return try await ServerConfig.load(file: path, environment: environment, overrides: overrides)
        } catch {
            // Temporary paths differ every run; FILE stands for this one.
            throw Failure(message: "\(error)".replacingOccurrences(of: path, with: "FILE"))
        }
    }

    struct Failure: Error {
        let message: String
    }

    /// The message `load` fails with.
    func failure(
        yaml: String? = nil, environment: [String: String] = [:], overrides: [String: String] = [:]
    ) async -> String? {
        do {
            _ = try await load(yaml: yaml, environment: environment, overrides: overrides)
            Issue.record("load succeeded but should have failed")
            return nil
        } catch let failure as Failure {
            return failure.message
        } catch let error as ConfigError {
            return error.description
        } catch {
            Issue.record("not a ConfigError: \(error)")
            return nil
        }
    }

    @Test func defaults() async throws {
        let server = ServerConfig().server
        #expect(server.host == "127.0.0.1" && server.port == 8080 && server.idleTimeoutSeconds == 30)
        #expect(server.tlsCertFile == nil && server.tlsKeyFile == nil && !server.usesTLS)
        #expect(server.tokensFile == "tokens.yaml" && server.keepDir == nil)
        let analyzer = ServerConfig().analyzer
        #expect(analyzer.kind == .scripted && analyzer.scriptFile == nil && analyzer.order == .inOrder)
        #expect(ServerConfig().usage.remainingSeconds == nil)
        #expect("\(ServerConfig().log.level)" == "info")

        // The scripted analyzer needs its script; everything else may stay at its default.
        var expected = ServerConfig()
        expected.analyzer.scriptFile = "script.yaml"
        #expect(try await load(overrides: ["analyzer.scriptFile": "script.yaml"]) == expected)
        let port = ServerConfig.keys.first { $0.name == "server.port" }
        #expect(port?.environmentVariable == "GUIDANCE_SERVER_PORT" && port?.defaultValue == "8080")
    }

    /// The server's own defaults are the configuration's: what an unset key gives is what the
    /// server runs with.
    @Test func theConfigurationsDefaultsAreTheServers() {
        let config = ServerConfig(), standard = StreamServer.Settings()
        #expect(config.server.maxSegmentBytes == standard.maxSegmentBytes)
        #expect(config.server.maxInFlightMegabytes << 20 == standard.maxInFlightBytes)
        #expect(config.server.retryAfterSeconds == standard.retryAfterSeconds && standard.retryAfterSeconds == 2)
        #expect(config.clips.maxMegabytesPerOwner << 20 == standard.maxClipBytesPerOwner)
        #expect(ServerConfig.Kind.gemini.defaultModel == "gemini-2.5-flash" && ServerConfig.Kind.openai.defaultModel == nil)
    }

    /// Where the server reaches itself (the simulated provider's webhook): its own address, or
    /// loopback when it listens on all of them.
    @Test(arguments: [
        ("0.0.0.0", false, "http://127.0.0.1:8080"), ("::", false, "http://[::1]:8080"), ("::1", true, "https://[::1]:8080"),
        ("127.0.0.1", false, "http://127.0.0.1:8080"), ("guidance.example.com", true, "https://guidance.example.com:8080")
    ])
    func theServersOwnURL(host: String, tls: Bool, expected: String) {
        let settings = StreamServer.Settings(host: host, tls: tls ? (certificateFile: "c.pem", keyFile: "k.pem") : nil)
        #expect(settings.ownURL(port: 8080) == expected)
    }

    @Test func demoServerYAML() async throws {
        let config = try await ServerConfig.load(
            file: Self.deviceConfig.appendingPathComponent("demo-server.yaml").path, environment: [:])
        var expected = ServerConfig()
        expected.server.tokensFile = "device-config/demo-tokens.yaml"
        expected.ledger = "sqlite:out/demo-usage.sqlite"
        expected.analyzer.scriptFile = "device-config/demo-script.yaml"
        #expect(config == expected)
    }

    /// The config deployed as shipped never plays the demo script: the car would hear the same
    /// lines whatever is on the road.
    @Test func theShippedServerYAMLIsSafeToDeploy() async throws {
        let config = try await ServerConfig.load(
            file: Self.deviceConfig.appendingPathComponent("server.yaml").path, environment: [:])
        #expect(config.analyzer.kind == .vision && config.analyzer.scriptFile == nil)
        #expect(config.server.host == "127.0.0.1" && config.server.tokensFile == "/etc/guidance-server/tokens.yaml")
        #expect(config.ledger == "sqlite:/var/lib/guidance-server/usage.sqlite")
        let unit = try String(
            contentsOf: Self.deviceConfig.deletingLastPathComponent()
                .appendingPathComponent("deploy/server/guidance-server.service"), encoding: .utf8)
        #expect(unit.contains("--config /etc/guidance-server/server.yaml") && unit.contains("StateDirectory=guidance-server"))
    }

    /// The ready configs for the hosted analyzers load as they are shipped.
    @Test func hostedAnalyzerConfigs() async throws {
        let gemini = try await ServerConfig.load(
            file: Self.deviceConfig.appendingPathComponent("server-gemini.yaml").path, environment: [:])
        #expect(gemini.analyzer.kind == .gemini && gemini.analyzer.apiKeyFile == "/etc/guidance-server/gemini.key")
        #expect(gemini.analyzer.model == "gemini-2.5-flash" && gemini.analyzer.timeoutMs == 8000 && !gemini.analyzer.transcodeToH264)
        let openai = try await ServerConfig.load(
            file: Self.deviceConfig.appendingPathComponent("server-openai.yaml").path, environment: [:])
        #expect(openai.analyzer.kind == .openai && openai.analyzer.endpoint == "http://127.0.0.1:8081/v1")
        #expect(openai.analyzer.keyframes == 3 && openai.analyzer.apiKeyFile == nil)
        let vision = try await ServerConfig.load(
            file: Self.deviceConfig.appendingPathComponent("server-vision.yaml").path, environment: [:])
        #expect(vision.analyzer.kind == .vision && vision.analyzer.visionFrames == 4)
        // Each kind says what it cannot do without.
        #expect(await failure(yaml: "analyzer:\n  kind: gemini\n")?.contains("analyzer.apiKeyFile") == true)
        #expect(await failure(yaml: "analyzer:\n  kind: openai\n")?.contains("analyzer.model") == true)
        #expect(await failure(yaml: "analyzer:\n  kind: openai\n  model: m\n  keyframes: 9\n")?.contains("analyzer.keyframes") == true)
        #expect(
            await failure(yaml: "analyzer:\n  kind: openai\n  model: m\n  endpoint: 127.0.0.1:8081\n")?
                .contains("analyzer.endpoint") == true)
    }

    @Test func environmentBeatsFileBeatsDefault() async throws {
        let yaml = """
            server:
              port: 9001
              keepDir: kept
              idleTimeoutSeconds: 5
            analyzer:
              scriptFile: script.yaml
              order: seq
            usage:
              remainingSeconds: 600
            """
        let fromFile = try await load(yaml: yaml)
        #expect(fromFile.server.port == 9001 && fromFile.server.keepDir == "kept")
        #expect(fromFile.server.idleTimeoutSeconds == 5 && fromFile.server.host == "127.0.0.1")
        #expect(fromFile.analyzer.order == .bySeq && fromFile.usage.remainingSeconds == 600)

        let environment = ["GUIDANCE_SERVER_PORT": "9002", "DASHCAM_SERVER_PORT": "1", "SERVER_PORT": "2"]
        #expect(try await load(yaml: yaml, environment: environment).server.port == 9002)
        #expect(try await load(yaml: yaml, environment: environment, overrides: ["server.port": "0"]).server.port == 0)
        #expect(
            await failure(yaml: yaml, environment: ["GUIDANCE_SERVER_PORT": "65536"])
                == "server.port: '65536' is not allowed; expected an integer 0...65535 (given by environment variable GUIDANCE_SERVER_PORT)"
        )
    }

    @Test func unknownKeyNamesTheKeyWithASuggestion() async throws {
        #expect(
            await failure(yaml: "server:\n  prot: 9000\n")
                == "FILE:2: unknown key 'server.prot' (did you mean 'server.port'?)")
        #expect(
            await failure(yaml: "analyzer:\n  script: a.yaml\n")
                == "FILE:2: unknown key 'analyzer.script' (valid keys here: analyzer.kind, analyzer.scriptFile, analyzer.order, analyzer.endpoint, analyzer.model, analyzer.apiKeyFile, analyzer.timeoutMs, analyzer.transcodeToH264, analyzer.keyframes, analyzer.visionFrames)"
        )
        #expect(
            await failure(yaml: "camera:\n  fps: 10\n")
                == "FILE:1: unknown key 'camera' (valid keys here: server, analyzer, usage, pairing, payments, clips, mail, log, ledger)")
        #expect(
            await failure(overrides: ["server.tokenFile": "t.yaml"])
                == "command line: unknown key 'server.tokenFile' (did you mean 'server.tokensFile'?)")
    }

    @Test func tlsCertificateWithoutKeyNamesBothKeys() async throws {
        let base = ["analyzer.scriptFile": "script.yaml"]
        let error = await #expect(throws: ConfigError.self) {
            try await ServerConfig.load(
                file: nil, environment: ["GUIDANCE_SERVER_TLS_CERT_FILE": "cert.pem"], overrides: base)
        }
        #expect(error?.key == "server.tlsKeyFile")
        #expect(
            error?.description
                == "server.tlsKeyFile: not set, but server.tlsCertFile is set; TLS needs both, or neither for plain HTTP")
        #expect(
            await failure(overrides: base.merging(["server.tlsKeyFile": "key.pem"]) { $1 })
                == "server.tlsCertFile: not set, but server.tlsKeyFile is set; TLS needs both, or neither for plain HTTP")
        let both = try await load(
            overrides: base.merging(["server.tlsCertFile": "cert.pem", "server.tlsKeyFile": "key.pem"]) { $1 })
        #expect(both.server.usesTLS)
    }

    /// The simulated provider lets anyone signed in credit usage: beyond loopback only when said so.
    @Test func theSimulatedProviderBeyondLoopbackMustBeAllowed() async throws {
        let base = ["analyzer.scriptFile": "script.yaml", "payments.provider": "simulated"]
        for host in ["127.0.0.1", "localhost", "::1"] {
            #expect(try await load(overrides: base.merging(["server.host": host]) { $1 }).payments.provider == .simulated)
        }
        let refused = await failure(overrides: base.merging(["server.host": "0.0.0.0"]) { $1 })
        #expect(refused?.hasPrefix("payments.provider: 'simulated' is not allowed") == true, "\(refused ?? "")")
        #expect(refused?.contains("payments.allowSimulated: true") == true)
        let allowed = try await load(overrides: base.merging(["server.host": "0.0.0.0", "payments.allowSimulated": "true"]) { $1 })
        #expect(allowed.payments.allowSimulated)
        #expect(try await load(overrides: ["analyzer.scriptFile": "script.yaml", "server.host": "0.0.0.0"]).payments.provider == .none)
    }

    /// `mail.*`: a relay is HOST:PORT and needs a sender; a user name needs its password file;
    /// each error names the key, the value and what is allowed.
    @Test func mailKeysAreCheckedAlone() async throws {
        let base = ["analyzer.scriptFile": "script.yaml"]
        let defaults = try await load(overrides: base).mail
        #expect(
            defaults.relay == nil && defaults.from == nil && defaults.starttls == .whenOffered && defaults.maxPerCarPerHour == 4
                && defaults.timeoutMs == 30_000 && defaults.username == nil && defaults.caFile == nil)
        let good = base.merging(["mail.relay": "smtp.example.org:587", "mail.from": "dashcam@example.org"]) { $1 }
        let loaded = try await load(overrides: good.merging(["mail.starttls": "required", "mail.maxPerCarPerHour": "10"]) { $1 }).mail
        #expect(loaded.relay == "smtp.example.org:587" && loaded.starttls == .required && loaded.maxPerCarPerHour == 10)
        #expect(try await load(overrides: good.merging(["mail.relay": "[::1]:25"]) { $1 }).mail.relay == "[::1]:25")
        for relay in ["smtp.example.org", "smtp.example.org:0", "smtp.example.org:70000", ":25", "a b:25", "::1:25", "[nope]:25"] {
            let refused = await failure(overrides: good.merging(["mail.relay": relay]) { $1 })
            #expect(refused?.hasPrefix("mail.relay: '\(relay)'") == true && refused?.contains("HOST:PORT") == true, "\(refused ?? "")")
        }
        #expect(
            await failure(overrides: base.merging(["mail.relay": "smtp.example.org:587"]) { $1 })
                == "mail.from: not set, but mail.relay is set; set it to the address mails come from, such as dashcam@example.org")
        let badFrom = await failure(overrides: good.merging(["mail.from": "dashcam@example.org\r\nBcc: x@y"]) { $1 })
        #expect(badFrom?.hasPrefix("mail.from:") == true && badFrom?.contains("a plain address") == true, "\(badFrom ?? "")")
        let badMode = await failure(overrides: good.merging(["mail.starttls": "always"]) { $1 })
        #expect(
            badMode?.contains("mail.starttls") == true && badMode?.contains("whenOffered") == true && badMode?.contains("required") == true,
            "\(badMode ?? "")")
        let badRate = await failure(overrides: good.merging(["mail.maxPerCarPerHour": "0"]) { $1 })
        #expect(badRate?.contains("mail.maxPerCarPerHour") == true && badRate?.contains("60") == true, "\(badRate ?? "")")
        #expect(
            await failure(overrides: good.merging(["mail.username": "ana"]) { $1 })
                == "mail.passwordFile: not set, but mail.username is set; the relay's password goes in a file (mode 0600)")
        #expect(
            await failure(overrides: good.merging(["mail.passwordFile": "pw"]) { $1 })
                == "mail.username: not set, but mail.passwordFile is set; AUTH needs a user name too")
    }

    @Test func scriptedAnalyzerNeedsScriptFile() async throws {
        let error = await #expect(throws: ConfigError.self) {
            try await ServerConfig.load(file: nil, environment: [:])
        }
        #expect(error?.key == "analyzer.scriptFile")
        #expect(
            error?.description
                == "analyzer.scriptFile: not set, but analyzer.kind is 'scripted'; set it to the YAML script to play")
    }

    /// Keeps device-config/README.md's server key table equal to `ServerConfig.keys`.
    /// `UPDATE_CONFIG_DOCS=1 swift test --filter serverReadmeKeyTable` rewrites the table instead.
    @Test func serverReadmeKeyTable() throws {
        let mismatch = try GeneratedSection.mismatch(
            in: Self.deviceConfig.appendingPathComponent("README.md"), name: "GENERATED SERVER KEY TABLE",
            generated: ServerConfig.markdownTable() + "\n")
        #expect(
            mismatch == nil,
            "device-config/README.md's server key table differs from ServerConfig.keys; run UPDATE_CONFIG_DOCS=1 swift test --filter serverReadmeKeyTable"
        )
    }
}
