import CRoadVision

/// OpenCV's HOG people detector (Dalal and Triggs' pedestrian SVM, as Debian's
/// libopencv-objdetect ships it). One detector may be used from several threads at once; each
/// call blocks its thread for tens to hundreds of milliseconds, so call it off any async pool.
public final class PeopleDetector: @unchecked Sendable {
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

    private let detector: OpaquePointer

    public init() throws {
        guard let detector = road_people_detector_new() else { throw Failure(description: "OpenCV could not make its HOG people detector") }
        self.detector = detector
    }

    deinit { road_people_detector_free(detector) }

    /// The people in `frame` with at least `minWeight` confidence, surest first (at most 32).
    public func people(in frame: GrayFrame, minWeight: Double) throws -> [Person] {
        var found = [road_person](repeating: road_person(), count: 32)
        var error = [CChar](repeating: 0, count: 256)
        let count = frame.pixels.withUnsafeBufferPointer { pixels in
            road_people_detect(detector, pixels.baseAddress, Int32(frame.width), Int32(frame.height), Int32(frame.width), minWeight,
                               &found, Int32(found.count), &error, Int32(error.count))
        }
        guard count >= 0 else {
            throw Failure(description: String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return found.prefix(Int(min(count, Int32(found.count)))).map {
            Person(x: Int($0.x), y: Int($0.y), width: Int($0.width), height: Int($0.height), weight: $0.weight)
        }
    }
}
