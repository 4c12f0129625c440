import Agent
import Foundation
import HAL
import RoadScene
import Testing

/// The local road checks on frames with known content, offered the way the capture thread offers
/// them: a dark frame, a flat one, the same frame again and again, and people in real footage
/// nobody here made (`vtest.avi` from Debian's opencv-doc).
@Suite(.serialized) struct RoadWatchTests {
    static let vtest = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
    static var hasFootage: Bool { FileManager.default.fileExists(atPath: vtest) }

    /// A 4:2:0 planar frame of `luma` (video range), with neutral chroma.
    struct Picture {
        let width: Int
        let height: Int
        var luma: [UInt8]
        let chroma: [UInt8]

        init(width: Int, height: Int, luma: (Int, Int) -> UInt8) {
            self.width = width
            self.height = height
            self.luma = (0..<height).flatMap { y in (0..<width).map { x in luma(x, y) } }
            chroma = [UInt8](repeating: 128, count: width * height / 4)
        }

        func offer(to tap: any FrameTap) {
            luma.withUnsafeBufferPointer { y in
                chroma.withUnsafeBufferPointer { c in
                    tap.offer(
                        Frame(
                            planes: (y.baseAddress, c.baseAddress, c.baseAddress, nil),
                            strides: (Int32(width), Int32(width / 2), Int32(width / 2), 0),
                            pixelFormat: .yuv420p, width: width, height: height, timestamp: MonotonicClock.now(), sequence: 0))
                }
            }
        }
    }

    /// Noise of ±`spread` around `level`, different in every frame (a live sensor).
    static func noisy(_ level: Int, spread: Int, width: Int = 640, height: Int = 360) -> Picture {
        Picture(width: width, height: height) { _, _ in UInt8(clamping: level + Int.random(in: -spread...spread)) }
    }

    /// Offers each picture once a look is due and returns what each look found.
    static func looks(at pictures: [Picture], watch: RoadWatch) async throws -> [RoadFinding?] {
        watch.start()
        var results = watch.results.makeAsyncIterator()
        var found: [RoadFinding?] = []
        for picture in pictures {
            try await offerUntilLooked(watch) { picture.offer(to: watch) }
            found.append(try #require(await results.next()).finding)
        }
        return found
    }

    /// Due every 100 ms at offline.fps 10; a frame offered early is not taken, so `offer` again
    /// until a look has searched it. Never while a search runs: a frame due then would get the
    /// picture checks alone, a second look at the same picture.
    static func offerUntilLooked(_ watch: RoadWatch, _ offer: () -> Void) async throws {
        let before = watch.counts.looked
        let deadline = ContinuousClock.now + .seconds(30)
        while watch.counts.looked == before, ContinuousClock.now < deadline {
            if !watch.isSearching { offer() }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func aDarkFrameIsTooDarkAndAFlatOneIsACoveredLens() async throws {
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 100)
        defer { Task { await watch.shutdown() } }
        // Video range: 16 is black. A night with nothing lit, then a lens cap in daylight.
        let dark = try await Self.looks(at: [Self.noisy(24, spread: 6), Self.noisy(24, spread: 6)], watch: watch)
        #expect(dark == [.tooDark, .tooDark])
        watch.stop()
        let flat = try await Self.looks(at: [Self.noisy(120, spread: 2), Self.noisy(120, spread: 2)], watch: watch)
        #expect(flat == [.lensCovered, .lensCovered])
        #expect(watch.counts.unreadable == 0)
    }

    @Test func theSameFrameAgainAndAgainIsFrozenAndALiveOneIsNot() async throws {
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 100)
        defer { Task { await watch.shutdown() } }
        // A gradient with texture: bright enough, not flat, no people.
        let still = Picture(width: 320, height: 180) { x, y in UInt8(40 + (x * 3 + y * 5) % 160) }
        let found = try await Self.looks(at: [still, still, still], watch: watch)
        #expect(found.first == .some(nil), "one frame cannot be frozen")
        #expect(found.last == .frozen)
        watch.stop()
        var moving = still
        let live = try await Self.looks(
            at: (0..<3).map { shift in
                moving.luma = still.luma.indices.map { still.luma[($0 + shift * 7) % still.luma.count] }
                return moving
            }, watch: watch)
        #expect(live == [nil, nil, nil])
    }

    /// OpenCV (libRoadVision.so and the libraries it pulls in) is loaded by the first look that
    /// searches for people: not when the watch is made, not for a dark picture.
    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"))
    func openCVIsLoadedOnlyWhenALookSearchesForPeople() async throws {
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 100)
        defer { Task { await watch.shutdown() } }
        #expect(!watch.detectorLoaded)
        #expect(try await Self.looks(at: [Self.noisy(12, spread: 6)], watch: watch) == [.tooDark])
        #expect(!watch.detectorLoaded, "the scene check answered first")
        let source = FileSource(path: Self.vtest, fps: 10, realtime: false)
        _ = try source.open()
        defer { source.close() }
        var results = watch.results.makeAsyncIterator()
        let frame = try #require(try source.nextFrame())
        try await Self.offerUntilLooked(watch) { watch.offer(frame) }
        let found = try #require(await results.next()).finding
        #expect(found == .pedestrian || found == .pedestrianClose, "\(String(describing: found))")
        #expect(watch.detectorLoaded)
    }

    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"))
    func peopleInRealFootageArePedestrians() async throws {
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 100)
        defer { Task { await watch.shutdown() } }
        let source = FileSource(path: Self.vtest, fps: 10, realtime: false)
        _ = try source.open()
        defer { source.close() }
        watch.start()
        var results = watch.results.makeAsyncIterator()
        var found: [RoadFinding?] = []
        // Frames 0, 100, 200, 300: people walk across the square in all of them.
        var index = 0
        while found.count < 4, let frame = try source.nextFrame() {
            defer { index += 1 }
            guard index % 100 == 0 else { continue }
            try await Self.offerUntilLooked(watch) { watch.offer(frame) }
            found.append(try #require(await results.next()).finding)
        }
        #expect(found.count == 4)
        #expect(found.allSatisfy { $0 == .pedestrian || $0 == .pedestrianClose }, "\(found)")
    }

    /// The rule, with time passed in: after a search, the next waits for the CPU share's rest and
    /// for its due frame; a search that saw an unsure shape waits only for the rest.
    @Test func aSearchThatSawAnUnsureShapeIsFollowedAsSoonAsTheShareAllows() {
        // A 100-ms search at 50 % of a core rests 100 ms; the next frame is due 900 ms on.
        let plain = RoadWatch.nextLook(at: 1_000_000_000, took: 100_000_000, idleFactor: 1, due: 1_800_000_000, again: false)
        #expect(plain.restingUntil == 1_100_000_000 && plain.due == 1_800_000_000)
        let again = RoadWatch.nextLook(at: 1_000_000_000, took: 100_000_000, idleFactor: 1, due: 1_800_000_000, again: true)
        #expect(again.restingUntil == 1_100_000_000 && again.due == 1_100_000_000)
        // A share so small that the rest outlasts the interval: the rest decides either way.
        let slow = RoadWatch.nextLook(at: 1_000_000_000, took: 100_000_000, idleFactor: 19, due: 1_800_000_000, again: true)
        #expect(slow.restingUntil == 2_900_000_000 && slow.due == 1_800_000_000)
    }

    /// On real footage: with every shape unsure (no confidence counts as a person, any counts as a
    /// shape) and looks an hour apart, the first search is followed by a second at once, and the
    /// second is not followed early again.
    @Test(.enabled(if: hasFootage, "needs opencv-doc's vtest.avi"))
    func anUnsureShapeIsSearchedAgainOnceAtTheNextFrame() async throws {
        var look = RoadLook()
        look.minWeight = 1000
        look.maybeWeight = 0
        let watch = try RoadWatch(interval: .seconds(3600), maxCpuPercent: 100, look: look)
        defer { Task { await watch.shutdown() } }
        let source = FileSource(path: Self.vtest, fps: 10, realtime: false)
        _ = try source.open()
        defer { source.close() }
        watch.start()
        var results = watch.results.makeAsyncIterator()
        var frame = try #require(try source.nextFrame())
        try await Self.offerUntilLooked(watch) { watch.offer(frame) }
        let first = try #require(await results.next())
        #expect(first.finding == nil && first.again, "\(first)")
        frame = try #require(try source.nextFrame())
        try await Self.offerUntilLooked(watch) { watch.offer(frame) }
        let second = try #require(await results.next())
        #expect(watch.counts.looked == 2, "the second came before the hour was up: \(watch.counts)")
        #expect(second.finding == nil && !second.again, "once in a row: \(second)")
    }

    @Test func framesDueWhileTheCPUShareIsUsedUpAreSkippedAndCounted() async throws {
        // 5 % of a core: a look of t rests 19 t, so a camera at 10 fps outruns it.
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 5)
        defer { Task { await watch.shutdown() } }
        let picture = Self.noisy(110, spread: 60)
        watch.start()
        var results = watch.results.makeAsyncIterator()
        picture.offer(to: watch)
        let first = try #require(await results.next())
        #expect(watch.counts.looked == 1)
        // Frames at 10 fps for as long as the rest lasts (at least 19 looks' time, and 1 s).
        let rest = max(first.took * 19, .seconds(1))
        let end = ContinuousClock.now + rest
        while ContinuousClock.now < end {
            picture.offer(to: watch)
            try await Task.sleep(for: .milliseconds(100))
        }
        let counts = watch.counts
        #expect(counts.skipped >= 3, "\(counts), first look \(first.took)")
        #expect(counts.looked <= 2, "\(counts)")
    }

    /// Where a search for people takes seconds (a slow board, the VM suite's emulated CPU), the
    /// search rests long after each one; the picture checks do not wait for it.
    @Test func aViewThatGoesDarkIsToldWhileTheSearchForPeopleRests() async throws {
        // 1 % of a core: after a search of t, the next waits 99 t.
        let watch = try RoadWatch(fps: 10, maxCpuPercent: 1)
        defer { Task { await watch.shutdown() } }
        watch.start()
        var results = watch.results.makeAsyncIterator()
        Self.noisy(110, spread: 60).offer(to: watch)
        let first = try #require(await results.next())
        #expect(first.finding == nil && watch.counts.looked == 1)
        let deadline = ContinuousClock.now + .seconds(60)
        var dark: RoadWatch.Look?
        while dark == nil, ContinuousClock.now < deadline {
            Self.noisy(20, spread: 4).offer(to: watch)
            try await Task.sleep(for: .milliseconds(100))
            if watch.counts.skipped >= 2 { dark = await results.next() }
        }
        #expect(dark?.finding == .tooDark, "\(String(describing: dark))")
        #expect(watch.counts.looked == 1, "no second search yet: the picture check told it, \(watch.counts)")
    }

    @Test func lumaComesOutOfPackedSemiPlanarAndPlanarLayoutsInFullRange() throws {
        // 4x2 YUYV: Y0 U Y1 V …, video range; 16 is black and 235 white.
        let yuyv: [UInt8] = [
            16, 128, 235, 128, 126, 128, 16, 128,
            235, 128, 16, 128, 16, 128, 235, 128
        ]
        let luma = yuyv.withUnsafeBufferPointer {
            Frame(
                planes: ($0.baseAddress, nil, nil, nil), strides: (8, 0, 0, 0), pixelFormat: .yuyv422,
                width: 4, height: 2, timestamp: 0, sequence: 0
            ).luma(maxWidth: 640)
        }
        #expect(luma == Luma(width: 4, height: 2, pixels: [0, 255, 128, 0, 255, 0, 0, 255]))
        // NV12, rows 6 bytes apart (padding), halved to fit 2 pixels: every other pixel and row.
        let nv12: [UInt8] = [
            16, 99, 235, 99, 99, 99,
            99, 99, 99, 99, 99, 99,
            128, 128, 128, 128, 128, 128
        ]
        let half = nv12.withUnsafeBufferPointer {
            Frame(
                planes: ($0.baseAddress, $0.baseAddress! + 12, nil, nil), strides: (6, 6, 0, 0), pixelFormat: .nv12,
                width: 4, height: 2, timestamp: 0, sequence: 0
            ).luma(maxWidth: 2)
        }
        #expect(half == Luma(width: 2, height: 1, pixels: [0, 255]))
    }
}
