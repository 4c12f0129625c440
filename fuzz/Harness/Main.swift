#if FUZZING
    import CLibFuzzer
#endif
import FFmpegLog
import Foundation
import Logging

/// One parser under test: `run` reads an input and traps (``require(_:_:)``) when a promise breaks.
struct FuzzTarget: Sendable {
    let name: String
    let run: @Sendable (UnsafeRawBufferPointer) -> Void
}

let targets = [
    FuzzTarget(name: "messages", run: Messages.run),
    FuzzTarget(name: "answers", run: Answers.run),
    FuzzTarget(name: "segments", run: Segments.run),
    FuzzTarget(name: "pairing", run: Pairing.run),
    FuzzTarget(name: "gpsd", run: Gpsd.run),
    FuzzTarget(name: "iio", run: IIO.run),
    FuzzTarget(name: "mjpeg", run: MJPEG.run),
    FuzzTarget(name: "smtp", run: SMTP.run)
]

/// Stops the run, so that libFuzzer keeps the input, when what the code promises does not hold.
func require(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition { fatalError("broken promise: \(message())", file: file, line: line) }
}

/// The target picked by the command line, for libFuzzer's callback (a C function, no context).
nonisolated(unsafe) private var selected: FuzzTarget?

#if FUZZING
    /// The function libFuzzer's runtime expects (its own `main`, which this program's replaces, calls
    /// it); `main` hands it to the driver.
    @_cdecl("LLVMFuzzerTestOneInput")
    func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        selected!.run(UnsafeRawBufferPointer(start: data, count: size))
        return 0
    }
#endif

/// With libFuzzer (`GUIDANCE_FUZZ=1`, bench/fuzz.sh): `guidance-fuzz TARGET [LIBFUZZER FLAGS] [CORPUS...]`.
/// The target is also taken from `GUIDANCE_FUZZ_TARGET`, which is how the copies of itself that
/// libFuzzer starts (`-fork`, `-minimize_crash`) know it.
///
/// Without: `guidance-fuzz TARGET FILE|FOLDER...` runs each file (a folder's files, sorted) once
/// through the target: the seed corpus and the crashes found, as a regression check.
@main struct GuidanceFuzz {
    static func main() {
        var arguments = CommandLine.arguments
        let named = arguments.count > 1 ? targets.first { $0.name == arguments[1] } : nil
        if named != nil { arguments.remove(at: 1) }
        guard let target = named ?? targets.first(where: { $0.name == ProcessInfo.processInfo.environment["GUIDANCE_FUZZ_TARGET"] })
        else {
            FileHandle.standardError.write(Data("usage: guidance-fuzz \(targets.map(\.name).joined(separator: "|")) FILE|FOLDER...\n".utf8))
            exit(64)
        }
        setenv("GUIDANCE_FUZZ_TARGET", target.name, 1)
        // FFmpeg's complaints about the inputs ("moov atom not found") would be most of the output.
        FFmpegLog.route(level: .critical)
        #if FUZZING
            selected = target
            exit(libFuzzer(arguments))
        #else
            exit(replay(target, paths: Array(arguments.dropFirst())))
        #endif
    }

    #if FUZZING
        /// The command line libFuzzer reads, kept for the life of the process (LeakSanitizer would
        /// count it lost once the driver returns, as it does after `-minimize_crash`).
        nonisolated(unsafe) static var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?

        /// Hands libFuzzer the command line without the target's name.
        static func libFuzzer(_ arguments: [String]) -> Int32 {
            var argc = Int32(arguments.count)
            argv = .allocate(capacity: arguments.count + 1)
            for (i, argument) in arguments.enumerated() { argv![i] = strdup(argument) }
            argv![arguments.count] = nil
            return LLVMFuzzerRunDriver(&argc, &argv, fuzz)
        }
    #endif

    static func replay(_ target: FuzzTarget, paths: [String]) -> Int32 {
        guard !paths.isEmpty else {
            FileHandle.standardError.write(Data("usage: guidance-fuzz \(target.name) FILE|FOLDER...\n".utf8))
            return 64
        }
        var count = 0
        for path in paths {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
                FileHandle.standardError.write(Data("no such file: \(path)\n".utf8))
                return 66
            }
            let files =
                isFolder.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { "\(path)/\($0)" }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                data.withUnsafeBytes { target.run($0) }
                count += 1
            }
        }
        print("\(target.name): \(count) inputs replayed, every promise held")
        return 0
    }
}
