// netmon-probe: runs an RTNetlinkMonitor and prints one JSON line per event on stdout, for the
// network namespace tests (`ip netns exec NS netmon-probe`) and for trying the monitor by hand.
//
//   {"event":"ready","path":{...},"monotonicNs":...}            once the monitor runs
//   {"event":"change","reasons":[...],"old":{...},"new":{...},"monotonicNs":...}   per change
//   {"event":"error","message":"..."}                            if the monitor cannot start (exit 1)
//
// Options: --debounce-ms N (default 75), --verbose (debug logs on stderr). Ends when stdin
// reaches end of file, or on SIGTERM/SIGINT.
import Foundation
import Glibc
import HAL
import Logging

struct RouteJSON: Encodable {
    var interface: String
    var index: Int
    var gateway: String?
    var addresses: [String]
    var up: Bool

    init(_ route: NetworkPath.Route) {
        interface = route.interfaceName
        index = route.interfaceIndex
        gateway = route.gateway?.description
        addresses = route.addresses.sorted().map(\.description)
        up = route.isUp
    }
}

struct PathJSON: Encodable {
    var ipv4: RouteJSON?
    var ipv6: RouteJSON?

    init(_ path: NetworkPath) {
        ipv4 = path.ipv4.map(RouteJSON.init)
        ipv6 = path.ipv6.map(RouteJSON.init)
    }
}

struct EventJSON: Encodable {
    var event: String
    var path: PathJSON?
    var old: PathJSON?
    var new: PathJSON?
    var reasons: [String]?
    var message: String?
    /// CLOCK_MONOTONIC when the line was made, comparable across processes on this machine.
    var monotonicNs: UInt64 = monotonicNanoseconds()
}

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

func emit(_ event: EventJSON) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard var line = try? encoder.encode(event) else { return }
    line.append(UInt8(ascii: "\n"))
    FileHandle.standardOutput.write(line)
}

let arguments = CommandLine.arguments.dropFirst()
let verbose = arguments.contains("--verbose")
var debounceMs = 75
if let index = arguments.firstIndex(of: "--debounce-ms"), index + 1 < arguments.endIndex, let value = Int(arguments[index + 1]) {
    debounceMs = value
}

LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = verbose ? .debug : .info
    return handler
}
let logger = Logger(label: "netmon-probe")

let monitor: RTNetlinkMonitor
do {
    monitor = try RTNetlinkMonitor(logger: logger, debounce: .milliseconds(debounceMs))
} catch {
    emit(EventJSON(event: "error", message: "\(error)"))
    exit(1)
}

// Subscribe before saying "ready", so that no change after the line is missed.
let changes = monitor.changes()
emit(EventJSON(event: "ready", path: PathJSON(monitor.currentPath)))

// End when whoever started us closes our stdin (or goes away).
do {
    try NamedThread.start(name: "stdin") {
        while true {
            var byte: UInt8 = 0
            let count = read(0, &byte, 1)
            if count == 0 || (count < 0 && errno != EINTR) { break }
        }
        monitor.close()
    }.detach()
} catch {
    emit(EventJSON(event: "error", message: "\(error)"))
    exit(1)
}

for await change in changes {
    emit(EventJSON(event: "change", old: PathJSON(change.old), new: PathJSON(change.new), reasons: change.reasons))
}
exit(0)
