internal import CFFmpeg

/// `sws_scale` from a frame's planes (as ``Frame`` holds them) into `output`'s buffers: the one
/// place the C arrays libswscale takes are made from Swift's tuples.
func swsScale(
    _ context: OpaquePointer, planes: Frame.Planes, strides: Frame.Strides, height: Int,
    into output: UnsafeMutablePointer<AVFrame>
) {
    var planes = planes, strides = strides
    withUnsafeBytes(of: &planes) { planes in
        withUnsafeBytes(of: &strides) { strides in
            withUnsafeBytes(of: &output.pointee.data) { dst in
                withUnsafeBytes(of: &output.pointee.linesize) { dstStrides in
                    _ = sws_scale(
                        context, planes.assumingMemoryBound(to: UnsafePointer<UInt8>?.self).baseAddress!,
                        strides.assumingMemoryBound(to: Int32.self).baseAddress!, 0, Int32(height),
                        dst.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self).baseAddress!,
                        dstStrides.assumingMemoryBound(to: Int32.self).baseAddress!)
                }
            }
        }
    }
}

/// The first four planes of an `AVFrame` as a ``Frame`` holds them.
func framePlanes(of frame: UnsafePointer<AVFrame>) -> (Frame.Planes, Frame.Strides) {
    let data = frame.pointee.data, lines = frame.pointee.linesize
    return (
        (UnsafePointer(data.0), UnsafePointer(data.1), UnsafePointer(data.2), UnsafePointer(data.3)),
        (lines.0, lines.1, lines.2, lines.3)
    )
}
