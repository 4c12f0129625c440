import Foundation
import Mustache

/// The owners' pages as files (`Owners/Pages`, a resource of this module): Mustache templates
/// and one stylesheet, loaded once at start.
enum OwnerTemplates {
    static var folder: String? { Bundle.module.path(forResource: "Pages", ofType: nil) }

    static func library() async throws -> MustacheLibrary {
        guard let folder else { throw OwnerPagesError("the owners' page templates are not installed beside the server") }
        return try await MustacheLibrary(directory: folder)
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
