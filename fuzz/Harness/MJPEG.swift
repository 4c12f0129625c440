import HAL

/// What a USB camera sends as MJPEG (`camera.pixelFormat: mjpeg`): any bytes as one frame, to a
/// decoder for a 64x48 stream. A frame is either refused (counted) or a whole 64x48 yuv420p
/// picture whose planes can be read end to end; the decoder takes the next frame either way.
enum MJPEG {
    nonisolated(unsafe) static let decoder = try! MJPEGDecoder(width: 64, height: 48)

    static func run(_ input: UnsafeRawBufferPointer) {
        let refusedBefore = decoder.refused
        guard let frame = decoder.decode(input, timestamp: 1, sequence: 2) else {
            require(decoder.refused == refusedBefore + 1, "a refusal not counted")
            require(decoder.lastProblem != nil, "a refusal without a reason")
            return
        }
        require(
            frame.width == 64 && frame.height == 48 && frame.pixelFormat == .yuv420p,
            "a \(frame.width)x\(frame.height) \(frame.pixelFormat) frame")
        require(frame.timestamp == 1 && frame.sequence == 2, "the frame's time and sequence changed")
        var sum = 0
        for (plane, rows, columns) in [(frame.planes.0, 48, 64), (frame.planes.1, 24, 32), (frame.planes.2, 24, 32)] {
            guard let plane else { require(false, "a missing plane"); return }
            let stride =
                plane == frame.planes.0 ? Int(frame.strides.0) : plane == frame.planes.1 ? Int(frame.strides.1) : Int(frame.strides.2)
            require(stride >= columns, "a stride of \(stride) for \(columns) columns")
            for row in 0..<rows { for column in 0..<columns { sum &+= Int(plane[row * stride + column]) } }
        }
        require(sum >= 0, "unreachable")
    }
}
