@testable import Agent
import Foundation
import HAL
import Testing

/// The G-sensor's rules on whole sequences of readings, with their own times: a recorded crash
/// (Fixtures/accel/SOURCES.md) and the shapes of a hard brake, a pothole, a door slam and a
/// collision made from published figures, at every sensitivity.
struct IncidentDetectorTests {
    static let second: UInt64 = 1_000_000_000
    /// Readings start here (any time the monotonic clock may show).
    static let t0: UInt64 = 1_000 * second

    /// `seconds` of readings at `hz`, gravity along `up` (a unit vector: how the sensor is
    /// mounted), plus `shake(t)`: the dynamic part in the car's frame (forward, left, up) in g, t in
    /// seconds from the start. A little sensor noise, the same in every run.
    static func readings(
        hz: Double = 50, seconds: Double, up: (Double, Double, Double) = (0, 0, 1),
        shake: (Double) -> (forward: Double, left: Double, up: Double)
    ) -> [Acceleration] {
        // The car's frame in the sensor's: `up` given, forward any unit vector across it.
        let u = up
        let helper = abs(u.0) < 0.9 ? (1.0, 0.0, 0.0) : (0.0, 1.0, 0.0)
        func cross(_ a: (Double, Double, Double), _ b: (Double, Double, Double)) -> (Double, Double, Double) {
            (a.1 * b.2 - a.2 * b.1, a.2 * b.0 - a.0 * b.2, a.0 * b.1 - a.1 * b.0)
        }
        func unit(_ a: (Double, Double, Double)) -> (Double, Double, Double) {
            let n = (a.0 * a.0 + a.1 * a.1 + a.2 * a.2).squareRoot()
            return (a.0 / n, a.1 / n, a.2 / n)
        }
        let left = unit(cross(u, helper))
        let forward = cross(left, u)
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        func noise() -> Double {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return (Double(seed >> 11) / Double(1 << 53) - 0.5) * 0.04  // ±0.02 g
        }
        return (0..<Int(seconds * hz)).map { i in
            let t = Double(i) / hz
            let s = shake(t)
            let g = (
                u.0 + s.up * u.0 + s.forward * forward.0 + s.left * left.0,
                u.1 + s.up * u.1 + s.forward * forward.1 + s.left * left.1,
                u.2 + s.up * u.2 + s.forward * forward.2 + s.left * left.2
            )
            return Acceleration(x: g.0 + noise(), y: g.1 + noise(), z: g.2 + noise(), at: t0 + UInt64(t * 1e9))
        }
    }

    static func halfSine(_ t: Double, at start: Double, length: Double, peak: Double) -> Double {
        t >= start && t < start + length ? peak * sin(.pi * (t - start) / length) : 0
    }

    /// Emergency stop from t = 3 s: 0.7 g of deceleration, reached in 0.3 s, held 2 s.
    static let hardBrake = readings(seconds: 8) { t in
        let ramp = min(1, max(0, (t - 3) / 0.3)) * (t < 5.3 ? 1 : max(0, 1 - (t - 5.3) / 0.3))
        return (-0.7 * ramp, 0, 0)
    }
    /// A pothole at t = 3 s: a 40-ms jolt of 1.5 g up-down, then the suspension rings at 12 Hz.
    static let pothole = readings(hz: 100, seconds: 6) { t in
        let ring = t > 3.04 ? 0.5 * exp(-(t - 3.04) / 0.15) * sin(2 * .pi * 12 * (t - 3.04)) : 0
        return (0, 0, halfSine(t, at: 3, length: 0.04, peak: 1.5) + ring)
    }
    /// A door slammed on the parked car at t = 3 s: one sample's knock of 1.2 g across, and a ring.
    static let doorSlam = readings(seconds: 6) { t in
        let knock = abs(t - 3) < 0.001 ? 1.2 : 0
        let ring = t > 3 ? 0.3 * exp(-(t - 3) / 0.05) * sin(2 * .pi * 25 * (t - 3)) : 0
        return (0, knock + ring, 0.2 * ring)
    }
    /// A low-speed collision at t = 3 s: a 100-ms half-sine of 6.6 g across (Δv 15 km/h).
    static func collision(at impacts: [Double] = [3], seconds: Double = 8, up: (Double, Double, Double) = (0, 0, 1)) -> [Acceleration] {
        readings(seconds: seconds, up: up) { t in
            (-impacts.reduce(0) { $0 + halfSine(t, at: $1, length: 0.1, peak: 6.6) }, 0, 0)
        }
    }

    /// The recorded e-scooter crash (MIT; Fixtures/accel/SOURCES.md).
    static func scooterCrash() throws -> [Acceleration] {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/accel/scooter-crash.csv")
        let rows = try String(contentsOf: file, encoding: .utf8).split(whereSeparator: \.isNewline).dropFirst().map { line in
            let f = line.split(separator: ",").compactMap { Double($0) }
            return f.count == 4 ? Acceleration(x: f[1], y: f[2], z: f[3], at: t0 + UInt64(f[0] * 1e6)) : nil
        }
        try #require(rows.count == 1054 && rows.allSatisfy { $0 != nil }, "every row of the recording read")
        return rows.compactMap { $0 }
    }

    static func settings(_ sensitivity: IncidentSensitivity) -> IncidentDetector.Settings {
        IncidentDetector.Settings(sensitivity: sensitivity, before: .seconds(10), after: .seconds(10))
    }

    /// Every action for `readings`, then the clock run on to well past any incident's end.
    static func run(_ readings: [Acceleration], _ sensitivity: IncidentSensitivity) -> [IncidentDetector.Action] {
        var detector = IncidentDetector(settings: settings(sensitivity))
        var actions = readings.flatMap { detector.read($0) }
        actions += detector.tick(now: (readings.last?.at ?? t0) + 120 * second)
        return actions
    }

    static func incidents(_ actions: [IncidentDetector.Action]) -> [IncidentDetector.Incident] {
        actions.compactMap { if case .closed(let incident) = $0 { incident } else { nil } }
    }

    @Test(arguments: [IncidentSensitivity.high, .medium, .low])
    func aCollisionIsAnIncidentAtEveryLevel(_ sensitivity: IncidentSensitivity) throws {
        let actions = Self.run(Self.collision(), sensitivity)
        let incident = try #require(Self.incidents(actions).first)
        #expect(Self.incidents(actions).count == 1)
        guard case .opened(let opened) = try #require(actions.first) else { Issue.record("\(actions)"); return }
        // Opened within the pulse, from 10 s before it to 10 s after.
        let impact = Self.t0 + 3 * Self.second
        #expect(opened.firstImpact >= impact && opened.firstImpact <= impact + Self.second / 10, "\(opened)")
        // ... to 10 s after the last reading over the thresholds: the 100-ms pulse and the smoothing.
        #expect(incident.start == opened.firstImpact - 10 * Self.second)
        #expect(incident.end >= opened.firstImpact + 10 * Self.second && incident.end <= impact + 10 * Self.second + Self.second / 5)
        #expect(incident.impacts == 1)
        #expect(incident.peakG > 6 && incident.peakG < 7.2, "\(incident.peakG)")
    }

    @Test func nothingIsAnIncidentWhenOff() {
        #expect(Self.run(Self.collision(), .off).isEmpty)
    }

    @Test(arguments: [IncidentSensitivity.high, .medium, .low])
    func aRecordedCrashIsOneIncidentAtEveryLevel(_ sensitivity: IncidentSensitivity) throws {
        let crash = try Self.scooterCrash()
        let actions = Self.run(crash, sensitivity)
        let found = Self.incidents(actions)
        #expect(found.count == 1, "\(found)")
        let incident = try #require(found.first)
        // The main impact (2.2–2.8 s in) is inside it, and so is the rider's shaking before.
        #expect(incident.start <= Self.t0 + 2_200_000_000 && incident.end >= Self.t0 + 2_800_000_000 + 10 * Self.second)
        #expect(incident.end - incident.start <= 60 * Self.second)
        #expect(incident.peakG >= 8, "\(incident.peakG)")
    }

    @Test func aHardBrakeIsAnIncidentOnlyAtHigh() throws {
        let high = Self.incidents(Self.run(Self.hardBrake, .high))
        #expect(high.count == 1 && high.first?.impacts == 1, "one incident, one impact however long the brake: \(high)")
        #expect(Self.run(Self.hardBrake, .medium).isEmpty)
        #expect(Self.run(Self.hardBrake, .low).isEmpty)
    }

    @Test(arguments: [IncidentSensitivity.high, .medium, .low])
    func aPotholeOrADoorSlamIsNot(_ sensitivity: IncidentSensitivity) {
        #expect(Self.run(Self.pothole, sensitivity).isEmpty)
        #expect(Self.run(Self.doorSlam, sensitivity).isEmpty)
    }

    @Test func theSensorMayBeMountedAtAnyAngle() throws {
        // On its side, and tilted: the same collision, the same incident; the brake still only at high.
        for up in [(1.0, 0.0, 0.0), (0.0, -0.6, 0.8)] {
            let found = Self.incidents(Self.run(Self.collision(up: up), .low))
            #expect(found.count == 1 && (found.first?.peakG ?? 0) > 6, "\(up): \(found)")
            #expect(Self.run(Self.readings(seconds: 8, up: up) { t in (t > 3 && t < 5 ? -0.7 : 0, 0, 0) }, .medium).isEmpty)
        }
    }

    @Test func repeatedImpactsAreOneIncidentOfAtMostAMinute() throws {
        // Two impacts 5 s apart: one incident, to 10 s after the second.
        var actions = Self.run(Self.collision(at: [3, 8], seconds: 12), .medium)
        var found = Self.incidents(actions)
        #expect(found.count == 1 && found.first?.impacts == 2, "\(found)")
        #expect(actions.contains { if case .extended = $0 { true } else { false } })
        let first = try #require(found.first)
        #expect(first.end >= Self.t0 + 18 * Self.second && first.end <= Self.t0 + 18 * Self.second + Self.second / 5, "\(first)")
        // Impacts every 8 s for two minutes (a car rolling over and over): none longer than a minute.
        let impacts = stride(from: 3.0, to: 120, by: 8).map { $0 }
        actions = Self.run(Self.collision(at: impacts, seconds: 125), .medium)
        found = Self.incidents(actions)
        #expect(found.count >= 2, "\(found.count)")
        #expect(found.allSatisfy { $0.end - $0.start <= 60 * Self.second })
        // Every impact is in one of them.
        for impact in impacts {
            let at = Self.t0 + UInt64(impact * 1e9)
            #expect(found.contains { $0.start <= at && at <= $0.end }, "impact at \(impact) s")
        }
        // Impacts 30 s apart: two incidents.
        #expect(Self.incidents(Self.run(Self.collision(at: [3, 33], seconds: 40), .medium)).count == 2)
    }

    @Test func anIncidentClosesOnTheClockWithoutReadings() throws {
        var detector = IncidentDetector(settings: Self.settings(.medium))
        let readings = Self.collision(seconds: 4)
        let opened = readings.flatMap { detector.read($0) }
        #expect(opened.count == 1)
        let end = try #require(detector.deadline)
        #expect(detector.tick(now: end - 1).isEmpty)
        #expect(Self.incidents(detector.tick(now: end)).count == 1)
        #expect(detector.deadline == nil)
    }

    @Test func gravityIsLearntAgainAfterAGap() {
        // The sensor turned over while the agent was not reading (a remount): no shock.
        var detector = IncidentDetector(settings: Self.settings(.high))
        var actions = Self.readings(seconds: 3) { _ in (0, 0, 0) }.flatMap { detector.read($0) }
        let later = Self.readings(seconds: 3, up: (1, 0, 0)) { _ in (0, 0, 0) }.map {
            Acceleration(x: $0.x, y: $0.y, z: $0.z, at: $0.at + 10 * Self.second)
        }
        actions += later.flatMap { detector.read($0) }
        #expect(actions.isEmpty, "\(actions)")
    }
}
