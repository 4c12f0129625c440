import Foundation
import Hummingbird
import HTTPTypes

/// The owner's trips: each drive of their cars (``TripRules``), newest first, with start, end,
/// distance, duration and top speed; a trip's page draws its track (``TripDrawing``, no outside
/// tiles). A car's drives are forgotten when it is unpaired, so its next owner never sees the
/// last one's.
extension OwnerPages {
    static let tripsShown = 100

    func addTrips(to router: Router<GuidanceRequestContext>) {
        router.get("/trips") { request, _ in
            try await signedIn(request) { session in
                let clock = try await ownerClock(session)
                var rows: [(start: Int64, row: [String: Any])] = []
                for car in try await store.devices(owner: session.owner) {
                    for trip in try await store.trips(device: car.device, limit: Self.tripsShown) {
                        rows.append((trip.startMs, tripRow(trip, car: car, clock: clock)))
                    }
                }
                let shown = rows.sorted { $0.start > $1.start }.prefix(Self.tripsShown).map(\.row)
                var values: [String: Any] = ["title": t("Trips"), "trips": shown, "hasTrips": !shown.isEmpty]
                if !clock.isZoneChosen { values["askZone"] = true }
                return page("trips", session, values)
            }
        }
        router.get("/trips/:device/:start") { request, context in
            let device = context.parameters.get("device") ?? ""
            let start = context.parameters.get("start").flatMap { Int64($0) }
            return try await signedIn(request) { session in
                guard let start, let car = try await store.devices(owner: session.owner).first(where: { $0.device == device }),
                    let trip = try await store.trip(device: device, startMs: start)
                else {
                    return page(
                        "message", session, ["title": t("No such trip"), "next": "/trips", "nextLabel": t("Back to the trips")],
                        status: .notFound)
                }
                let clock = try await ownerClock(session)
                var values = tripRow(trip, car: car, clock: clock)
                values["title"] = t("Trip of {name}, {time}", ["name": car.label, "time": clock.text(trip.startMs)])
                if let drawing = TripDrawing(try await store.track(device: device, fromMs: trip.startMs, toMs: trip.endMs)) {
                    values["drawing"] =
                        [
                            "height": Int(drawing.height), "points": drawing.polyline,
                            "startX": drawing.start.x, "startY": drawing.start.y, "endX": drawing.end.x, "endY": drawing.end.y
                        ] as [String: Any]
                }
                return page("trip", session, values)
            }
        }
    }

    /// What the list and a trip's page show of it, in the owner's zone and language.
    private func tripRow(_ trip: Trip, car: OwnedDevice, clock: OwnerClock) -> [String: Any] {
        let seconds = Int((trip.endMs - trip.startMs) / 1000)
        func place(_ point: (lat: Double, lon: Double)) -> [String: String] {
            let (lat, lon) = (String(format: "%.5f", point.lat), String(format: "%.5f", point.lon))
            return ["text": "\(lat), \(lon)", "map": "https://www.openstreetmap.org/?mlat=\(lat)&mlon=\(lon)#map=15/\(lat)/\(lon)"]
        }
        return [
            "device": car.device, "start": trip.startMs, "car": car.label,
            "from": clock.text(trip.startMs), "to": clock.text(trip.endMs),
            "distance": t("{km} km", ["km": t.number(trip.distanceMeters / 1000, fractionDigits: 1)]),
            "duration": seconds >= 60 ? Self.spoken(seconds - seconds % 60, t) : Self.spoken(seconds, t),
            "topSpeed": t("{speed} km/h", ["speed": t.number(Int((trip.topSpeed * 3.6).rounded()))]),
            "startPlace": place(trip.start), "endPlace": place(trip.end)
        ]
    }
}
