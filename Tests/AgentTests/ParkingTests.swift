@testable import Agent
import Foundation
import HAL
import Testing

private let ms: UInt64 = 1_000_000
private let s: UInt64 = 1_000_000_000

/// The parking rules, the motion detector and the clip rules, with time passed in.
struct ParkingRulesTests {
    let settings = ParkingRules.Settings(debounceNs: 500 * ms, delayNs: 60 * s)

    @Test func ignitionOffParksAfterTheDelayCountedFromTheEdge() {
        var rules = ParkingRules(settings: settings)
        let r1 = rules.read(true, at: 0)
        #expect(r1.isEmpty)
        let r2 = rules.tick(at: 500 * ms)
        #expect(r2.isEmpty)
        #expect(rules.ignition == true)
        let r3 = rules.read(false, at: 10 * s)
        #expect(r3.isEmpty)
        #expect(rules.nextDeadline == 10 * s + 500 * ms)
        let r4 = rules.tick(at: 10 * s + 500 * ms)
        #expect(r4.isEmpty)
        #expect(rules.ignition == false)
        #expect(rules.nextDeadline == 70 * s)
        let r5 = rules.tick(at: 70 * s - 1)
        #expect(r5.isEmpty)
        let r6 = rules.tick(at: 70 * s)
        #expect(r6 == [.park])
        #expect(rules.mode == .parked)
        #expect(rules.nextDeadline == nil)
    }

    @Test func aBounceShorterThanTheDebounceIsNoChange() {
        var rules = ParkingRules(settings: settings)
        _ = rules.read(true, at: 0)
        _ = rules.tick(at: 1 * s)
        // A starter motor's dip: off for 300 ms.
        let r7 = rules.read(false, at: 5 * s)
        #expect(r7.isEmpty)
        let r8 = rules.read(true, at: 5 * s + 300 * ms)
        #expect(r8.isEmpty)
        let r9 = rules.tick(at: 100 * s)
        #expect(r9.isEmpty)
        #expect(rules.ignition == true)
        #expect(rules.mode == .driving)
    }

    @Test func ignitionOnWithinTheDelayStaysDriving() {
        var rules = ParkingRules(settings: settings)
        _ = rules.read(false, at: 0)
        _ = rules.tick(at: 1 * s)
        let r10 = rules.read(true, at: 30 * s)
        #expect(r10.isEmpty)
        let r11 = rules.tick(at: 31 * s)
        #expect(r11.isEmpty)
        let r12 = rules.tick(at: 200 * s)
        #expect(r12.isEmpty)
        #expect(rules.mode == .driving)
    }

    @Test func ignitionOnDrivesAtOnceAndTellsTheEventsSaved() {
        var rules = ParkingRules(settings: settings)
        _ = rules.read(false, at: 0)
        let r13 = rules.tick(at: 60 * s + 500 * ms)
        #expect(r13 == [.park])
        rules.eventSaved()
        rules.eventSaved()
        #expect(rules.events == 2)
        _ = rules.read(true, at: 100 * s)
        let r14 = rules.tick(at: 100 * s + 499 * ms)
        #expect(r14.isEmpty)
        let r15 = rules.tick(at: 100 * s + 500 * ms)
        #expect(r15 == [.drive(events: 2)])
        #expect(rules.events == 0)
        // Counted only while parked.
        rules.eventSaved()
        #expect(rules.events == 0)
    }

    @Test func anIgnitionOffAtStartParksTheDelayAfterItWasFirstRead() {
        var rules = ParkingRules(settings: .init(debounceNs: 0, delayNs: 5 * s))
        let r16 = rules.read(false, at: 3 * s)
        #expect(r16.isEmpty)
        let r17 = rules.tick(at: 8 * s)
        #expect(r17 == [.park])
    }
}

struct MotionDetectorTests {
    /// A 160x90 picture: a gradient background with colour-bar-like stripes, and a dark box.
    static func picture(box: (x: Int, y: Int)? = nil, brightness: Int = 0, gain: Double = 1) -> Luma {
        var pixels = [UInt8](repeating: 0, count: 160 * 90)
        for y in 0..<90 {
            for x in 0..<160 {
                var value = Double(40 + (x / 20) * 22 + y / 3)
                if let box, (box.x..<box.x + 20).contains(x), (box.y..<box.y + 20).contains(y) { value = 15 }
                pixels[y * 160 + x] = UInt8(max(0, min(255, value * gain + Double(brightness))))
            }
        }
        return Luma(width: 160, height: 90, pixels: pixels)
    }

    let medium = MotionDetector.Settings(sensitivity: .medium)!

    @Test func aStillSceneIsNoMotion() {
        var detector = MotionDetector(settings: medium)
        for _ in 0..<50 { let r18 = detector.look(Self.picture()); #expect(!r18) }
    }

    @Test func aMovingBoxIsMotion() {
        var detector = MotionDetector(settings: medium)
        let r19 = detector.look(Self.picture(box: (10, 30)))
        #expect(!r19)
        let r20 = detector.look(Self.picture(box: (10, 30)))
        #expect(!r20)
        let r21 = detector.look(Self.picture(box: (60, 30)))
        #expect(r21)
    }

    @Test func aWholeFrameLightingChangeIsNoMotion() {
        var detector = MotionDetector(settings: medium)
        for _ in 0..<5 { _ = detector.look(Self.picture()) }
        // A street lamp: everything 40 brighter; then the exposure: everything 30 % darker.
        let r22 = detector.changedBlocks(Self.picture(brightness: 40))
        #expect(r22 < medium.blocks)
        for _ in 0..<3 { let r23 = detector.look(Self.picture(brightness: 40)); #expect(!r23) }
        let r24 = detector.changedBlocks(Self.picture(gain: 0.7))
        #expect(r24 < medium.blocks)
        for _ in 0..<3 { let r25 = detector.look(Self.picture(gain: 0.7)); #expect(!r25) }
    }

    @Test func sensitivityOffWatchesNothing() {
        #expect(MotionDetector.Settings(sensitivity: .off) == nil)
        #expect(MotionDetector.Settings(sensitivity: .high)!.blocks < MotionDetector.Settings(sensitivity: .low)!.blocks)
    }

    /// People walking in footage nobody here made (opencv-doc's `vtest.avi`), at 5 fps: seen in
    /// most pictures; its first picture, repeated, never.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: RoadWatchTests.vtest), "needs opencv-doc's vtest.avi"))
    func peopleWalkingAreMotionAndTheirStillPictureIsNot() throws {
        let source = FileSource(path: RoadWatchTests.vtest, fps: 10, realtime: false)
        _ = try source.open()
        defer { source.close() }
        var walking = MotionDetector(settings: medium)
        var still = MotionDetector(settings: medium)
        var first: Luma?
        var moved = 0, looked = 0, stillMoved = 0
        var index = 0
        while looked < 100, let frame = try source.nextFrame() {
            defer { index += 1 }
            guard index % 2 == 0, let luma = frame.luma(maxWidth: 160) else { continue }
            if first == nil { first = luma }
            looked += 1
            if walking.look(luma) { moved += 1 }
            if still.look(first!) { stillMoved += 1 }
        }
        #expect(looked == 100)
        #expect(moved >= 80, "motion seen in \(moved) of \(looked) pictures")
        #expect(stillMoved == 0)
    }
}

struct ParkedClipRulesTests {
    let settings = ParkedClipRules.Settings(preRollNs: 5 * s, afterNs: 10 * s, maxLengthNs: 60 * s)

    @Test func aTriggerStartsAClipWithThePreRollAndRunsPastTheLastTrigger() {
        var watch = ParkedClipRules(settings: settings)
        let r26 = watch.frame(at: 100 * s, trigger: nil, preRollStart: 100 * s)
        #expect(r26 == .hold(dropBefore: 95 * s))
        let r27 = watch.frame(at: 101 * s, trigger: .motion, preRollStart: 96 * s)
        #expect(r27 == .start(.motion))
        #expect(watch.clip?.start == 96 * s)
        #expect(watch.clip?.until == 111 * s)
        let r28 = watch.frame(at: 105 * s, trigger: .impact, preRollStart: 0)
        #expect(r28 == .record)
        #expect(watch.clip?.until == 115 * s)
        let r29 = watch.frame(at: 114 * s, trigger: nil, preRollStart: 0)
        #expect(r29 == .record)
        let r30 = watch.frame(at: 115 * s, trigger: nil, preRollStart: 0)
        #expect(r30 == .end)
        #expect(watch.clip == nil)
        let r31 = watch.frame(at: 116 * s, trigger: nil, preRollStart: 116 * s)
        #expect(r31 == .hold(dropBefore: 111 * s))
    }

    @Test func triggersKeepAClipToAMinute() {
        var watch = ParkedClipRules(settings: settings)
        _ = watch.frame(at: 10 * s, trigger: .motion, preRollStart: 5 * s)
        var ended: UInt64?
        for t in stride(from: 11 * s, through: 200 * s, by: Int(s)) where ended == nil {
            if watch.frame(at: t, trigger: .motion, preRollStart: 0) == .end { ended = t }
        }
        #expect(ended == 65 * s)
    }

    @Test func cutEndsAClipInProgress() {
        var watch = ParkedClipRules(settings: settings)
        let r32 = watch.cut()
        #expect(!r32)
        _ = watch.frame(at: 10 * s, trigger: .impact, preRollStart: 10 * s)
        let r33 = watch.cut()
        #expect(r33)
        #expect(watch.clip == nil)
    }
}
