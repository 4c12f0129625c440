internal import CFFmpeg
internal import CShims

/// FFmpeg's error text for an `AVERROR` code.
func averrorText(_ code: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: 128)
    if av_strerror(code, &buffer, buffer.count) < 0 { return "error \(code)" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

let averrorEAGAIN = dashcam_averror(EAGAIN)
let averrorEOF = dashcam_averror_eof
