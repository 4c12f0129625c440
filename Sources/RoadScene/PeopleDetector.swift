#if canImport(Glibc)
    import Glibc
#endif
import Synchronization

/// OpenCV's HOG people detector (Dalal and Triggs' pedestrian SVM, as Debian's
/// libopencv-objdetect ships it), reached through the C functions of `CRoadVision`: linked into
/// the guidance server, loaded by the agent from `libRoadVision.so` the first time it looks, so
/// that a device that never looks never maps OpenCV (about 13 MiB resident with what it pulls in).
///
/// One detector may be used from several threads at once; each call blocks its thread for tens
/// to hundreds of milliseconds, so call it off any async pool.
public final class PeopleDetector: Sendable {
    public struct Person: Sendable, Equatable {
        public var x: Int
        public var y: Int
        public var width: Int
        public var height: Int
        /// The SVM's margin: higher is surer.
        public var weight: Double
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The three C functions of `CRoadVision.h`.
    public struct Functions: Sendable {
        public typealias New = @convention(c) () -> OpaquePointer?
        public typealias Free = @convention(c) (OpaquePointer?) -> Void
        public typealias Detect =
            @convention(c) (
                OpaquePointer?, UnsafePointer<UInt8>?, Int32, Int32, Int32, Int32, Double, Double,
                UnsafeMutablePointer<Int32>?, UnsafeMutablePointer<Double>?, Int32, UnsafeMutablePointer<CChar>?, Int32
            ) -> Int32

        public var new: New
        public var free: Free
        public var detect: Detect

        public init(new: New, free: Free, detect: Detect) {
            self.new = new
            self.free = free
            self.detect = detect
        }
    }

    /// Where the functions come from.
    public enum Source: Sendable {
        /// Linked into this binary.
        case linked(Functions)
        /// The first of these shared libraries that exists, opened at the first search. The
        /// files are checked for at ``init(_:)``, so a missing library is an error at start.
        case library(candidates: [String])
    }

    /// The detector pointer is safe to share: its C functions may be called from several threads.
    private enum State: @unchecked Sendable {
        case unloaded
        case ready(Functions, OpaquePointer)
        case failed(String)
    }

    private let source: Source
    private let path: String?
    private let state: Mutex<State>

    /// With a linked source the detector is made at once; with a library, at the first search.
    public init(_ source: Source) throws {
        self.source = source
        switch source {
        case .linked(let functions):
            path = nil
            guard let detector = functions.new() else { throw Failure(description: "OpenCV could not make its HOG people detector") }
            state = Mutex(.ready(functions, detector))
        case .library(let candidates):
            guard let found = candidates.first(where: { access($0, R_OK) == 0 }) else {
                throw Failure(description: "no people detector library: none of \(candidates.joined(separator: ", ")) is readable")
            }
            path = found
            state = Mutex(.unloaded)
        }
    }

    deinit {
        if case .ready(let functions, let detector) = state.withLock({ $0 }) { functions.free(detector) }
    }

    /// Whether OpenCV is loaded (a library source loads it at the first search).
    public var isLoaded: Bool {
        if case .ready = state.withLock({ $0 }) { return true }
        return false
    }

    /// The people in `frame` with at least `minWeight` confidence, surest first (at most 32),
    /// searched at `searchHeight` rows (0: as it is) with pyramid levels `scaleStep` apart. Boxes
    /// are in `frame`'s pixels.
    public func people(in frame: GrayFrame, minWeight: Double, searchHeight: Int = 0, scaleStep: Double = 1.05) throws -> [Person] {
        let (functions, detector) = try loaded()
        let capacity = 32
        var boxes = [Int32](repeating: 0, count: 4 * capacity)
        var weights = [Double](repeating: 0, count: capacity)
        var error = [CChar](repeating: 0, count: 256)
        let count = frame.pixels.withUnsafeBufferPointer { pixels in
            functions.detect(
                detector, pixels.baseAddress, Int32(frame.width), Int32(frame.height), Int32(frame.width),
                Int32(clamping: searchHeight), scaleStep, minWeight, &boxes, &weights, Int32(capacity), &error, Int32(error.count))
        }
        guard count >= 0 else {
            throw Failure(description: String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        var people: [Person] = []
        for i in 0..<min(Int(count), capacity) {
            let box = boxes[(4 * i)..<(4 * i + 4)].map { Int($0) }
            people.append(Person(x: box[0], y: box[1], width: box[2], height: box[3], weight: weights[i]))
        }
        return people
    }

    private func loaded() throws -> (Functions, OpaquePointer) {
        try state.withLock { state in
            switch state {
            case .ready(let functions, let detector):
                return (functions, detector)
            case .failed(let reason):
                throw Failure(description: reason)
            case .unloaded:
                do {
                    let functions = try Self.open(path ?? "")
                    guard let detector = functions.new() else {
                        throw Failure(description: "OpenCV could not make its HOG people detector")
                    }
                    state = .ready(functions, detector)
                    return (functions, detector)
                } catch let failure as Failure {
                    state = .failed(failure.description)
                    throw failure
                }
            }
        }
    }

    /// The functions of the library at `path`. The library stays loaded for the life of the process.
    private static func open(_ path: String) throws -> Functions {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            throw Failure(description: "cannot load \(path): \(dlerror().map { String(cString: $0) } ?? "unknown error")")
        }
        func symbol<T>(_ name: String, as type: T.Type) throws -> T {
            guard let address = dlsym(handle, name) else { throw Failure(description: "\(path) has no \(name)") }
            return unsafeBitCast(address, to: type)
        }
        return Functions(
            new: try symbol("road_people_detector_new", as: Functions.New.self),
            free: try symbol("road_people_detector_free", as: Functions.Free.self),
            detect: try symbol("road_people_detect", as: Functions.Detect.self))
    }
}
