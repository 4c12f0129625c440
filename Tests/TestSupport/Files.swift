public import Foundation

/// Every file (not folder) under `folder`, as sorted paths relative to it: the recording's day
/// folders and `protected/` included.
public func files(under folder: URL) -> [String] {
    let paths = (try? FileManager.default.subpathsOfDirectory(atPath: folder.path)) ?? []
    return paths.filter { path in
        var isFolder: ObjCBool = false
        return FileManager.default.fileExists(atPath: folder.appendingPathComponent(path).path, isDirectory: &isFolder)
            && !isFolder.boolValue
    }.sorted()
}
