/// Whether a camera's picture can show the road at all, from a few frames of a clip: too dark,
/// one flat colour (a covered lens, a lens cap, a sticker), or frozen (the same picture again and
/// again). Pure: frames in, findings out.
public struct SceneCheck: Sendable, Equatable {
    /// Mean brightness (0…255) under which the view is too dark to see anything.
    public var darkMean = 30.0
    /// Standard deviation of brightness under which the picture is one flat colour.
    public var uniformDeviation = 6.0
    /// Mean absolute difference per pixel under which two frames seconds apart are the same
    /// picture. A live camera differs by more than this even on an empty parking lot: sensor
    /// noise alone is about 1.
    public var frozenDifference = 0.1

    public init() {}

    public enum Finding: String, Sendable, Equatable, CaseIterable {
        case tooDark = "too_dark"
        case lensCovered = "lens_covered"
        case frozen
    }

    /// At most one finding: dark before covered (a dark picture is flat too), covered before
    /// frozen (a flat picture never changes). Needs two frames or more to call one frozen.
    ///
    /// Dark is what the view is now: the newest two frames (or the only one) both dark. Earlier
    /// frames do not count, so a view that goes dark is told at the second look, not once the
    /// bright frames have left the window; a single dark frame (a flash of shadow) is not.
    public func finding(in frames: [GrayFrame]) -> Finding? {
        guard !frames.isEmpty else { return nil }
        let levels = frames.map(\.brightness)
        if levels.suffix(2).allSatisfy({ $0.mean < darkMean }) { return .tooDark }
        if levels.allSatisfy({ $0.deviation < uniformDeviation }) { return .lensCovered }
        if frames.count >= 2, zip(frames, frames.dropFirst()).allSatisfy({ $0.difference(from: $1) < frozenDifference }) {
            return .frozen
        }
        return nil
    }
}
