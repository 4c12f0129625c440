internal import Glibc

/// Finding the chip and the line a user named, and saying what went wrong in their words:
/// each message starts `GPIO chip "SPEC" LINE:` as given, or with the chip as found once it is.
extension GPIOLine {
    /// The chip `spec` names (a path, `gpiochipN`, `N` or a label; empty: every chip is searched
    /// for a line given by name), opened, and the line's offset on it.
    static func find(chip spec: String, line: Selector) throws(GPIOError) -> (chip: GPIOChip, offset: Int) {
        switch line {
        case .offset(let offset):
            guard !spec.isEmpty else { throw .invalidRequest("GPIO \(line): no chip given (a line offset needs a chip)") }
            guard offset >= 0 else { throw .invalidRequest("GPIO chip \"\(spec)\" \(line): a line offset is 0 or more") }
            let chip = try openChip(spec, for: line)
            guard offset < chip.lineCount else {
                let lines =
                    chip.lineCount == 0 ? "the chip has no lines" : "the chip has \(chip.lineCount) lines, 0...\(chip.lineCount - 1)"
                throw .lineNotFound("GPIO chip \(chip) \(line): no such line (\(lines))")
            }
            return (chip, offset)
        case .name(let name):
            guard !name.isEmpty else {
                throw .invalidRequest("GPIO chip \"\(spec)\": no line given (a line offset or a line name)")
            }
            guard !spec.isEmpty else { return try searchLine(name, line: line) }
            let chip = try openChip(spec, for: line)
            do {
                return (chip, try chip.offset(ofLine: name))
            } catch  where error.code == ENOENT {
                throw .lineNotFound("GPIO chip \(chip) \(line): no such line (\(text(ENOENT)))", code: ENOENT)
            } catch {
                throw .requestFailed("GPIO chip \(chip) \(line): cannot read the line names (\(text(error.code)))", code: error.code)
            }
        }
    }

    /// The chip and offset `line` names, with the line as messages call it: `line 5 "haptic"`.
    static func locate(chip: String?, line: Selector) throws(GPIOError) -> (chip: GPIOChip, offset: Int, resolved: String) {
        let (found, offset) = try find(chip: chip ?? "", line: line)
        let name = found.lineInfo(offset)?.name ?? ""
        return (found, offset, name.isEmpty ? "line \(offset)" : "line \(offset) \"\(name)\"")
    }

    /// Why the kernel refused the request, with who holds the line if it is busy.
    static func requestError(_ code: Int32, line: String, chip: GPIOChip, offset: Int, as direction: String = "output") -> GPIOError {
        let place = "GPIO chip \(chip) \(line)"
        switch code {
        case EBUSY:
            guard let info = chip.lineInfo(offset), info.used else {
                return .lineBusy("\(place): line busy (\(text(code)))", holder: nil, code: code)
            }
            guard !info.consumer.isEmpty else {
                return .lineBusy("\(place): line busy, used by an unnamed consumer (\(text(code)))", holder: nil, code: code)
            }
            return .lineBusy(
                "\(place): line busy, used by consumer \"\(info.consumer)\" (\(text(code)))", holder: info.consumer, code: code)
        case EACCES, EPERM:
            return .permissionDenied("\(place): permission denied (\(text(code)))", code: code)
        default:
            return .requestFailed("\(place): cannot request the line as \(direction) (\(text(code)))", code: code)
        }
    }

    /// A path, `gpiochipN` or `N` is opened as it is; anything else is a label, looked for on
    /// every chip.
    private static func openChip(_ spec: String, for line: Selector) throws(GPIOError) -> GPIOChip {
        let path: String? =
            if spec.contains("/") { spec } else if isNumber(spec) {
                "/dev/gpiochip\(spec)"
            } else if spec.hasPrefix("gpiochip"), isNumber(spec.dropFirst("gpiochip".count)) { "/dev/\(spec)" } else { nil }
        guard let path else { return try openChip(label: spec, for: line) }
        do {
            return try GPIOChip(path: path)
        } catch {
            let place = path == spec ? "GPIO chip \"\(spec)\" \(line)" : "GPIO chip \"\(spec)\" (\(path)) \(line)"
            switch error.code {
            case ENOENT:
                throw .chipNotFound("\(place): no such chip (\(text(ENOENT))); \(chipsHere())", code: ENOENT)
            case EACCES, EPERM:
                throw .permissionDenied("\(place): permission denied (\(text(error.code)))", code: error.code)
            case ENOTTY, ENODEV:
                throw .notAChip("\(place): not a GPIO chip (\(text(error.code)))", code: error.code)
            default:
                throw .requestFailed("\(place): cannot open the chip (\(text(error.code)))", code: error.code)
            }
        }
    }

    private static func openChip(label: String, for line: Selector) throws(GPIOError) -> GPIOChip {
        let place = "GPIO chip \"\(label)\" \(line)"
        let chips = try survey(place)
        for case .success(let chip) in chips.map(\.chip) where chip.label == label { return chip }
        if let denied = firstDenied(chips) {
            throw .permissionDenied(
                "\(place): no chip that could be opened has that label; \(denied.path): permission denied (\(text(denied.code)))",
                code: denied.code)
        }
        throw .chipNotFound("\(place): no such chip (\(text(ENOENT))); no chip has that label (\(list(chips)))", code: ENOENT)
    }

    /// The first chip with a line called `name`, in the order `gpiofind` looks.
    private static func searchLine(_ name: String, line: Selector) throws(GPIOError) -> (chip: GPIOChip, offset: Int) {
        let place = "GPIO \(line) (any chip)"
        let chips = try survey(place)
        var unreadable: (path: String, code: Int32)?
        for (path, opened) in chips {
            guard case .success(let chip) = opened else { continue }
            do {
                return (chip, try chip.offset(ofLine: name))
            } catch  where error.code != ENOENT {
                unreadable = unreadable ?? (path, error.code)
            } catch {}
        }
        if let denied = firstDenied(chips) {
            throw .permissionDenied(
                "\(place): no such line on the chips that could be read; \(denied.path): permission denied (\(text(denied.code)))",
                code: denied.code)
        }
        if let unreadable {
            throw .lineNotFound(
                "\(place): no such line on the chips that could be read; \(unreadable.path): cannot read it (\(text(unreadable.code)))",
                code: unreadable.code)
        }
        throw .lineNotFound("\(place): no such line (\(text(ENOENT))); no chip has it (\(list(chips)))", code: ENOENT)
    }

    private typealias Survey = [(path: String, chip: Result<GPIOChip, GPIOChip.Failure>)]

    /// Every chip, opened if it can be.
    private static func survey(_ place: String) throws(GPIOError) -> Survey {
        let paths: [String]
        do {
            paths = try GPIOChip.devicePaths()
        } catch {
            throw .requestFailed("\(place): cannot list /dev (\(text(error.code)))", code: error.code)
        }
        return paths.map { path in (path, Result { () throws(GPIOChip.Failure) in try GPIOChip(path: path) }) }
    }

    private static func firstDenied(_ chips: Survey) -> (path: String, code: Int32)? {
        for case (let path, .failure(let failure)) in chips where failure.code == EACCES || failure.code == EPERM {
            return (path, failure.code)
        }
        return nil
    }

    /// `chips here: gpiochip0 [pinctrl-bcm2711], gpiochip1 (permission denied)`, for a user
    /// who has to pick one.
    private static func list(_ chips: Survey) -> String {
        guard !chips.isEmpty else { return "there are no GPIO chips, /dev/gpiochipN" }
        let named = chips.map { path, opened in
            switch opened {
            case .success(let chip): chip.description
            case .failure(let failure): "\(path) (\(text(failure.code)))"
            }
        }
        return "chips here: " + named.joined(separator: ", ")
    }

    private static func chipsHere() -> String {
        guard let chips = try? survey("") else { return "cannot list /dev" }
        return list(chips)
    }

    private static func isNumber(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    static func text(_ code: Int32) -> String { String(cString: strerror(code)) }
}
