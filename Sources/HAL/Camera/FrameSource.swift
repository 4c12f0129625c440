/// Where frames come from: a V4L2 camera, the built-in test pattern, or a video file.
///
/// - Important: Calls block (a camera waits in `poll`), so a source is driven from a thread of its
///   own, never from the concurrency pool.
public protocol FrameSource: AnyObject {
    /// What the source reads, for logs: a device path, a file path, `test-pattern`.
    var name: String { get }
    /// Opens the device or file and negotiates the format; returns what was actually granted.
    func open() throws -> VideoFormat
    /// The layout of the frames; known after ``open()``.
    var pixelFormat: PixelFormat { get }
    /// The next frame, valid until the following call; `nil` at the end of a file.
    /// Throws ``SourceError`` with ``SourceError/isRecoverable`` when a camera is lost or stalls.
    func nextFrame() throws -> Frame?
    /// Releases the device. Safe to call twice.
    func close()
}

public struct SourceError: Error, Equatable, CustomStringConvertible {
    private enum Kind: Equatable {
        case notFound
        case notACaptureDevice
        case unsupported
        case lost
        case stalled
        case unreadable
    }
    private let kind: Kind
    /// The device or file path.
    public let path: String
    public let detail: String

    private init(_ kind: Kind, _ path: String, _ detail: String) {
        self.kind = kind
        self.path = path
        self.detail = detail
    }

    public static func notFound(_ path: String) -> Self { .init(.notFound, path, "") }
    public static func notACaptureDevice(_ path: String, _ detail: String) -> Self { .init(.notACaptureDevice, path, detail) }
    public static func unsupported(_ path: String, _ detail: String) -> Self { .init(.unsupported, path, detail) }
    public static func lost(_ path: String, _ detail: String) -> Self { .init(.lost, path, detail) }
    public static func stalled(_ path: String, _ detail: String) -> Self { .init(.stalled, path, detail) }
    public static func unreadable(_ path: String, _ detail: String) -> Self { .init(.unreadable, path, detail) }

    public var isNotFound: Bool { kind == .notFound }
    public var isLost: Bool { kind == .lost }
    /// Lost and stalled cameras come back: the pipeline reopens them instead of exiting.
    public var isRecoverable: Bool { kind == .lost || kind == .stalled }

    public var description: String {
        switch kind {
        case .notFound: "\(path): no such device or file"
        case .notACaptureDevice: "\(path): not a video capture device (\(detail))"
        case .unsupported: "\(path): \(detail)"
        case .lost: "camera lost: \(path): \(detail)"
        case .stalled: "camera stalled: \(path): \(detail)"
        case .unreadable: "\(path): cannot read video: \(detail)"
        }
    }
}
