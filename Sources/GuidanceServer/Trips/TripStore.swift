/// Where the cars' drives are kept (``TripRules``): each trip's summary and its spaced points,
/// in the ledger's database beside pairings (SQLite, or PostgreSQL for several instances).
public protocol TripStore: Sendable {
    /// Adds a segment's points (``TripRules/points(_:nowMs:)``) to the car's trips: in one transaction,
    /// so a trip's summary and its points never disagree.
    func recordTrack(device: String, points: [TrackPoint]) async throws
    /// The car's trips, newest first, at most `limit`. Unpairing a car forgets its trips: they
    /// were its owner's, and the next owner starts with none.
    func trips(device: String, limit: Int) async throws -> [Trip]
    /// One trip of the car, by its start.
    func trip(device: String, startMs: Int64) async throws -> Trip?
    /// The car's points within `fromMs ... toMs`, oldest first.
    func track(device: String, fromMs: Int64, toMs: Int64) async throws -> [TrackPoint]
    /// Forgets the trips (and their points) that ended before `beforeMs`.
    func expireTrips(beforeMs: Int64) async throws
}

extension TripStore {
    /// The most points a page draws (a 10-hour drive holds 18000).
    static var drawnPoints: Int { 2000 }
}
