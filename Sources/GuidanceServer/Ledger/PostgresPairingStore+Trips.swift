import PostgresNIO

extension PostgresPairingStore: TripStore {
    public func recordTrack(device: String, points: [TrackPoint]) async throws {
        guard !points.isEmpty else { return }
        let logger = self.logger
        try await transaction { db in
            var last: Trip?
            // The row is locked: two sessions of one car (a handover) add to its trip one after the other.
            for try await row in try await db.query(
                """
                SELECT start_at, end_at, distance_m, top_speed, start_lat, start_lon, end_lat, end_lon FROM device_trips
                WHERE device = \(device) ORDER BY start_at DESC LIMIT 1 FOR UPDATE
                """, logger: logger
            ).decode((Int64, Int64, Double, Double, Double, Double, Double, Double).self) {
                last = Self.trip(device, row)
            }
            let (changed, added) = TripRules.extend(last, device: device, with: points)
            for trip in changed {
                try await db.query(
                    """
                    INSERT INTO device_trips (device, start_at, end_at, distance_m, top_speed, start_lat, start_lon, end_lat, end_lon)
                    VALUES (\(device), \(trip.startMs), \(trip.endMs), \(trip.distanceMeters), \(trip.topSpeed), \(trip.start.lat), \(trip.start.lon),
                            \(trip.end.lat), \(trip.end.lon))
                    ON CONFLICT (device, start_at) DO UPDATE SET end_at = excluded.end_at, distance_m = excluded.distance_m,
                        top_speed = excluded.top_speed, end_lat = excluded.end_lat, end_lon = excluded.end_lon
                    """, logger: logger)
            }
            for point in added {
                try await db.query(
                    "INSERT INTO device_track (device, at, lat, lon, speed) VALUES (\(device), \(point.atMs), \(point.lat), \(point.lon), \(point.speed))",
                    logger: logger)
            }
        }
    }

    public func trips(device: String, limit: Int) async throws -> [Trip] {
        try await select(
            """
            SELECT start_at, end_at, distance_m, top_speed, start_lat, start_lon, end_lat, end_lon FROM device_trips
            WHERE device = \(device) ORDER BY start_at DESC LIMIT \(Int64(limit))
            """, device: device)
    }

    public func trip(device: String, startMs: Int64) async throws -> Trip? {
        try await select(
            """
            SELECT start_at, end_at, distance_m, top_speed, start_lat, start_lon, end_lat, end_lon FROM device_trips
            WHERE device = \(device) AND start_at = \(startMs)
            """, device: device
        ).first
    }

    public func track(device: String, fromMs: Int64, toMs: Int64) async throws -> [TrackPoint] {
        try await schema.ensure()
        var points: [TrackPoint] = []
        for try await (at, lat, lon, speed) in try await client.query(
            "SELECT at, lat, lon, speed FROM device_track WHERE device = \(device) AND at BETWEEN \(fromMs) AND \(toMs) ORDER BY at",
            logger: logger
        ).decode((Int64, Double, Double, Double).self) {
            points.append(TrackPoint(atMs: at, lat: lat, lon: lon, speed: speed))
        }
        return points
    }

    public func expireTrips(beforeMs: Int64) async throws {
        let logger = self.logger
        try await transaction { db in
            try await db.query("DELETE FROM device_track WHERE at < \(beforeMs)", logger: logger)
            try await db.query("DELETE FROM device_trips WHERE end_at < \(beforeMs)", logger: logger)
        }
    }

    private func select(_ query: PostgresQuery, device: String) async throws -> [Trip] {
        try await schema.ensure()
        var trips: [Trip] = []
        for try await row in try await client.query(query, logger: logger)
            .decode((Int64, Int64, Double, Double, Double, Double, Double, Double).self)
        {
            trips.append(Self.trip(device, row))
        }
        return trips
    }

    private static func trip(_ device: String, _ row: (Int64, Int64, Double, Double, Double, Double, Double, Double)) -> Trip {
        Trip(
            device: device, startMs: row.0, endMs: row.1, distanceMeters: row.2, topSpeed: row.3, start: (row.4, row.5), end: (row.6, row.7)
        )
    }
}
