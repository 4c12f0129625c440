import SQLiteNIO

extension SQLitePairingStore: TripStore {
    public func recordTrack(device: String, points: [TrackPoint]) async throws {
        guard !points.isEmpty else { return }
        _ = try await transaction { db in
            let last = try await db.query("SELECT * FROM device_trips WHERE device = ? ORDER BY start_at DESC LIMIT 1", [.text(device)])
                .first.map { Self.trip($0, device: device) }
            let (changed, added) = TripRules.extend(last, device: device, with: points)
            for trip in changed {
                _ = try await db.query(
                    """
                    INSERT INTO device_trips (device, start_at, end_at, distance_m, top_speed, start_lat, start_lon, end_lat, end_lon)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (device, start_at) DO UPDATE SET end_at = excluded.end_at, distance_m = excluded.distance_m,
                        top_speed = excluded.top_speed, end_lat = excluded.end_lat, end_lon = excluded.end_lon
                    """,
                    [
                        .text(device), .integer(Int(trip.startMs)), .integer(Int(trip.endMs)), .float(trip.distanceMeters),
                        .float(trip.topSpeed),
                        .float(trip.start.lat), .float(trip.start.lon), .float(trip.end.lat), .float(trip.end.lon)
                    ])
            }
            for point in added {
                _ = try await db.query(
                    "INSERT INTO device_track (device, at, lat, lon, speed) VALUES (?, ?, ?, ?, ?)",
                    [.text(device), .integer(Int(point.atMs)), .float(point.lat), .float(point.lon), .float(point.speed)])
            }
            return ()
        }
    }

    public func trips(device: String, limit: Int) async throws -> [Trip] {
        try await read { db in
            try await db.query(
                "SELECT * FROM device_trips WHERE device = ? ORDER BY start_at DESC LIMIT ?",
                [.text(device), .integer(limit)]
            ).map { Self.trip($0, device: device) }
        }
    }

    public func trip(device: String, startMs: Int64) async throws -> Trip? {
        try await read { db in
            try await db.query("SELECT * FROM device_trips WHERE device = ? AND start_at = ?", [.text(device), .integer(Int(startMs))])
                .first.map { Self.trip($0, device: device) }
        }
    }

    public func track(device: String, fromMs: Int64, toMs: Int64) async throws -> [TrackPoint] {
        try await read { db in
            try await db.query(
                "SELECT at, lat, lon, speed FROM device_track WHERE device = ? AND at BETWEEN ? AND ? ORDER BY at",
                [.text(device), .integer(Int(fromMs)), .integer(Int(toMs))]
            ).map {
                TrackPoint(
                    atMs: Int64($0.column("at")?.integer ?? 0), lat: $0.column("lat")?.double ?? 0, lon: $0.column("lon")?.double ?? 0,
                    speed: $0.column("speed")?.double ?? 0)
            }
        }
    }

    public func expireTrips(beforeMs: Int64) async throws {
        _ = try await transaction { db in
            _ = try await db.query("DELETE FROM device_track WHERE at < ?", [.integer(Int(beforeMs))])
            return try await db.query("DELETE FROM device_trips WHERE end_at < ?", [.integer(Int(beforeMs))])
        }
    }

    static func trip(_ row: SQLiteRow, device: String) -> Trip {
        func number(_ name: String) -> Double { row.column(name)?.double ?? 0 }
        return Trip(
            device: device, startMs: Int64(row.column("start_at")?.integer ?? 0), endMs: Int64(row.column("end_at")?.integer ?? 0),
            distanceMeters: number("distance_m"), topSpeed: number("top_speed"), start: (number("start_lat"), number("start_lon")),
            end: (number("end_lat"), number("end_lon")))
    }
}
