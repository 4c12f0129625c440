import Foundation
import Mustache

/// The owners' pages as files (`Owners/Pages`, a resource of this module): Mustache templates
/// and one stylesheet, loaded once at start.
enum OwnerTemplates {
    static var folder: String? { Bundle.module.path(forResource: "Pages", ofType: nil) }

    /// The templates, each checked to escape by scalar (``HTMLText``).
    static func library() async throws -> MustacheLibrary {
        guard let folder else { throw OwnerPagesError("the owners' page templates are not installed beside the server") }
        MustacheContentTypes.register(HTMLText(), named: HTMLText.name)
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".mustache") {
            try check(try String(contentsOfFile: folder + "/" + file, encoding: .utf8), named: file)
        }
        return try await MustacheLibrary(directory: folder)
    }

    /// A template must name the scalar escaper first: a partial starts again with swift-mustache's
    /// own HTML escaping, which compares `Character`s and lets a quote with a combining mark through.
    static func check(_ text: String, named name: String) throws {
        guard text.hasPrefix(HTMLText.pragma) else {
            throw OwnerPagesError("the page template \(name) does not begin with \(HTMLText.pragma)")
        }
    }

    static let stylesheet: String = folder.flatMap { try? String(contentsOfFile: $0 + "/owner.css", encoding: .utf8) } ?? ""

    /// A bcrypt hash of nothing anyone knows: checked against for an unknown address, so a
    /// failed sign-in takes as long whether or not the address has an account.
    static let dummyHash = "$2b$12$C6UzMDM.H6dfI/f/IKcEeO5pD6Q9Hh7Jm6g3d1lWZ3G8n4C1lQK6a"
}

struct OwnerPagesError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
