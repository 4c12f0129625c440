@testable import GuidanceServer
import Testing

/// The `Range` header of a clip's download: one range answered, anything else the whole file,
/// a start past the end 416; no number read from the header is trusted before it is checked.
@Suite struct ByteRangeTests {
    @Test(
        arguments: [
            (nil, ByteRange.whole),
            ("bytes=0-99", .part(0...99)),
            ("bytes=100-", .part(100...999)),
            ("bytes=-100", .part(900...999)),
            ("bytes=-5000", .part(0...999)),
            ("bytes=990-5000", .part(990...999)),
            (" Bytes=5-5 ", .part(5...5)),
            ("bytes = 5-5", .whole),
            ("bytes=1000-", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=5-4", .whole),
            ("bytes=0-1,5-6", .whole),
            ("items=0-1", .whole),
            ("bytes=a-b", .whole),
            ("bytes=-", .whole),
            ("bytes=99999999999999999999-", .whole),
            ("bytes=+5-9", .whole),
            ("bytes=0-99999999999999999999", .whole)
        ] as [(String?, ByteRange)])
    func aRangeIsReadOrLeftAlone(header: String?, expected: ByteRange) {
        #expect(ByteRange.parse(header, size: 1000) == expected)
    }

    @Test func anEmptyFileHasNoRange() {
        #expect(ByteRange.parse("bytes=0-", size: 0) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=-1", size: 0) == .unsatisfiable)
    }
}
