// swift-tools-version: 6.2
import PackageDescription

let upcoming: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault")
]

// `GUIDANCE_FUZZ=1` (bench/fuzz.sh, in a build folder of its own): the guidance server's parsers,
// the C they call and the fuzz harness are compiled with libFuzzer's coverage and AddressSanitizer;
// every other module as usual. Without it nothing changes and `guidance-fuzz` replays inputs.
let fuzzing = Context.environment["GUIDANCE_FUZZ"] == "1"
let fuzzed: [SwiftSetting] = fuzzing ? [.unsafeFlags(["-sanitize=fuzzer,address"])] : []
let fuzzedC: [CSetting] = fuzzing ? [.unsafeFlags(["-fsanitize=fuzzer-no-link,address"])] : []

let package = Package(
    name: "dashcam-agent",
    // Linux only (V4L2, libgpiod, ALSA, rtnetlink): no Apple platform is declared.
    products: [
        .executable(name: "dashcam-agent", targets: ["DashcamAgent"]),
        .executable(name: "guidance-server", targets: ["GuidanceServerMain"]),
        // OpenCV's people detector as a library of its own, which the agent loads only when its
        // local guidance first looks (the package installs it in /usr/lib/dashcam-agent).
        .library(name: "RoadVision", type: .dynamic, targets: ["CRoadVision"])
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.0.0", traits: ["YAML"]),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.0.0"),
        // The owners' web pages: sessions and bcrypt, and the pages' templates.
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.29.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
        // The server's usage ledger: SQLite (bundled) by default, PostgreSQL for fleets.
        .package(url: "https://github.com/vapor/sqlite-nio", from: "1.13.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        // The server's /metrics.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.0"),
        // The server's calls to hosted models (Gemini, OpenAI-compatible servers).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.24.0"),
        // Property-based tests of the server against random client messages.
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0")
    ],
    targets: [
        // C libraries, each behind its pkg-config name (libgpiod, whose 1.x and 2.x APIs differ, below).
        .systemLibrary(
            name: "CV4L2", pkgConfig: "libv4l2",
            providers: [.apt(["libv4l-dev"])]
        ),
        .systemLibrary(
            name: "CFFmpeg", pkgConfig: "libavformat libavcodec libswscale libavutil",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libswscale-dev", "libavutil-dev"])]
        ),
        // libgpiod 1.x or 2.x (libgpiod-dev): one C file picks the API at compile time.
        .target(
            name: "CGPIOD",
            linkerSettings: [.linkedLibrary("gpiod")]
        ),
        .systemLibrary(
            name: "CEspeakNG", pkgConfig: "espeak-ng",
            providers: [.apt(["libespeak-ng-dev"])]
        ),
        .systemLibrary(
            name: "CALSA", pkgConfig: "alsa",
            providers: [.apt(["libasound2-dev"])]
        ),
        // What Swift cannot import from those headers: function-like macros and variadics.
        .target(
            name: "CShims",
            dependencies: ["CV4L2", "CFFmpeg"]
        ),
        // The guidance server's work on a received segment: JPEG keyframes, H.264, gray frames.
        .target(
            name: "CSegmentVideo",
            dependencies: ["CFFmpeg"],
            cSettings: fuzzedC
        ),
        // OpenCV's HOG people detector (C++) behind a C interface (libopencv-objdetect-dev): linked
        // into the guidance server, built as libRoadVision.so for the agent.
        .target(
            name: "CRoadVision",
            cxxSettings: [.unsafeFlags(["-I/usr/include/opencv4"])],
            linkerSettings: [.linkedLibrary("opencv_objdetect"), .linkedLibrary("opencv_imgproc"), .linkedLibrary("opencv_core")]
        ),
        // What a camera's picture shows, on the CPU: people, and whether the view is usable.
        // The server's `vision` analyzer and the agent's local guidance use it. It reaches
        // CRoadVision through function pointers, so it links no OpenCV itself.
        .target(
            name: "RoadScene",
            swiftSettings: upcoming
        ),
        // FFmpeg's log lines through swift-log (av_log_set_callback), for agent and server.
        .target(
            name: "CFFmpegLog",
            dependencies: ["CFFmpeg"]
        ),
        // alsa-lib's error messages (snd_lib_error_set_handler's variadic handler) to a function.
        .target(
            name: "CALSALog",
            linkerSettings: [.linkedLibrary("asound")]
        ),
        .target(
            name: "FFmpegLog",
            dependencies: ["CFFmpegLog", "CALSALog", "GuidanceProtocol", .product(name: "Logging", package: "swift-log")],
            swiftSettings: upcoming
        ),
        // pthread_setname_np, which needs _GNU_SOURCE.
        .target(name: "CThreads"),

        // Files written whole or not at all, for the recording, config files and speech files.
        .target(
            name: "FileSupport",
            swiftSettings: upcoming
        ),

        // UTC times as text: RFC 3339 and ISO 8601 basic, written and read without ICU.
        .target(
            name: "UTC",
            swiftSettings: upcoming + fuzzed
        ),

        .target(
            name: "HAL",
            dependencies: [
                "FileSupport", "UTC",
                "CShims", "CThreads", "CV4L2", "CFFmpeg", "CGPIOD", "CALSA", "CEspeakNG",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio")
            ],
            swiftSettings: upcoming + fuzzed
        ),
        .target(
            name: "GuidanceProtocol",
            dependencies: ["UTC"],
            swiftSettings: upcoming + fuzzed
        ),
        // YAML + environment + command-line configuration with key validation, for agent and server.
        .target(
            name: "ConfigSupport",
            dependencies: [
                "FileSupport",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log")
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "Agent",
            dependencies: [
                "HAL",
                "RoadScene",
                "FFmpegLog",
                "GuidanceProtocol",
                "UTC",
                "ConfigSupport",
                "FileSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                // Pairing's two HTTP calls (the OAuth device grant and token renewal).
                .product(name: "AsyncHTTPClient", package: "async-http-client")
            ],
            swiftSettings: upcoming
        ),
        // The reference guidance server: Hummingbird + WebSocket, pluggable analyzers.
        .target(
            name: "GuidanceServer",
            dependencies: [
                "GuidanceProtocol",
                "UTC",
                "ConfigSupport",
                "CSegmentVideo",
                "RoadScene",
                "CRoadVision",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // Impact mails: STARTTLS to the mail relay (NIOTLS: the handshake's end).
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio")
            ],
            // The owners' pages: templates and stylesheet, apart from the Swift.
            resources: [.copy("Owners/Pages")],
            swiftSettings: upcoming + fuzzed
        ),
        .executableTarget(
            name: "GuidanceServerMain",
            dependencies: [
                "UTC",
                "GuidanceServer", "GuidanceProtocol",
                "ConfigSupport", "FFmpegLog",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser")
            ],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "DashcamAgent",
            dependencies: [
                "Agent",
                .product(name: "ArgumentParser", package: "swift-argument-parser")
            ],
            swiftSettings: upcoming
        ),

        // libFuzzer's entry point for a `main` of one's own (fuzz/CLibFuzzer: a header, nothing to build).
        .systemLibrary(name: "CLibFuzzer", path: "fuzz/CLibFuzzer"),
        // The guidance server's parsers of what comes from outside (client messages, model answers,
        // segments) under libFuzzer: `bench/fuzz.sh TARGET SECONDS`. In a normal build it replays
        // inputs: `guidance-fuzz TARGET FILE|FOLDER...` (the corpus and found crashes, fuzz/).
        .executableTarget(
            name: "guidance-fuzz",
            dependencies: [
                "GuidanceServer", "GuidanceProtocol", "RoadScene", "CLibFuzzer", "FFmpegLog", "HAL", "UTC",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOHTTP1", package: "swift-nio")
            ],
            path: "fuzz/Harness",
            swiftSettings: upcoming + fuzzed + (fuzzing ? [.define("FUZZING")] : []),
            linkerSettings: fuzzing ? [.unsafeFlags(["-sanitize=fuzzer,address"])] : []
        ),

        // The devices of bench/server_load.py as a compiled program: the load on the server costs
        // little CPU beside it. A bench tool, so it lives under bench/.
        .executableTarget(
            name: "server-load",
            dependencies: [
                "GuidanceProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio")
            ],
            path: "bench/ServerLoad",
            swiftSettings: upcoming
        ),

        // Prints one JSON line per network change; run by HALTests inside network namespaces.
        // A test tool, so it lives under Tests/; SwiftPM still builds it beside the test bundle.
        .executableTarget(
            name: "netmon-probe",
            dependencies: ["HAL", .product(name: "Logging", package: "swift-log")],
            path: "Tests/netmon-probe",
            swiftSettings: upcoming
        ),
        .target(
            name: "TestSupport",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio")
            ],
            path: "Tests/TestSupport",
            swiftSettings: upcoming
        ),
        // Tests by kind, each a target: a kind is run by its target's name, never by a list of suites.
        // - HALTests, AgentTests: in-process; real libraries, no child process, namespace or server
        //   of the system's (an in-process guidance server on loopback is allowed).
        // - GuidanceServerTests: the server's parts in-process (ingest, analyzers, model stand-ins).
        // - SystemTests: the built programs as processes, network namespaces, Debian's nginx and
        //   PostgreSQL, systemd's and dpkg's tools on the shipped files.
        .testTarget(
            name: "HALTests",
            dependencies: ["HAL", "UTC", "FFmpegLog", "GuidanceProtocol", "TestSupport", .product(name: "Logging", package: "swift-log")],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "AgentTests",
            dependencies: ["Agent", "HAL", "UTC", "GuidanceProtocol", "GuidanceServer", "ConfigSupport", "TestSupport", "RoadScene"],
            exclude: ["Fixtures"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "GuidanceServerTests",
            dependencies: [
                "GuidanceServer", "GuidanceProtocol", "UTC", "ConfigSupport", "TestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl")
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "SystemTests",
            dependencies: [
                "Agent", "HAL", "UTC", "GuidanceProtocol", "GuidanceServer", "ConfigSupport", "TestSupport", "RoadScene",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "NIOSSL", package: "swift-nio-ssl")
            ],
            swiftSettings: upcoming
        )
    ]
)
