import Foundation
import GuidanceProtocol
import Hummingbird
import HTTPTypes
import Logging
import NIOCore
import NIOPosix
import Synchronization
import UTC

/// The owner's events: the clips their cars uploaded (incidents, parking events, `protect`),
/// newest first, each with its place and a page that plays, downloads and deletes it.
///
/// A clip is its owner's alone: every route looks the car up among the signed-in owner's cars
/// first, and answers a car or clip that is not theirs exactly as one that does not exist (404),
/// so nothing tells another owner's clips apart from none.
extension OwnerPages {
    func addEvents(to router: Router<GuidanceRequestContext>, clips: any ClipStore) {
        router.get("/events") { request, _ in try await signedIn(request) { try await eventsPage(request, $0, clips: clips, notice: nil) } }
        router.get("/events/:device/:id") { request, context in
            let (device, id) = (context.parameters.get("device") ?? "", context.parameters.get("id") ?? "")
            return try await signedIn(request) { session in
                guard let (car, clip) = try await ownedClip(session, device: device, id: id, clips: clips) else {
                    return noSuchEvent(session)
                }
                return try await eventPage(request, session, car: car, clip: clip, clips: clips)
            }
        }
        router.get("/events/:device/:id/files/:name") { request, context in
            let (device, id, name) = (
                context.parameters.get("device") ?? "", context.parameters.get("id") ?? "", context.parameters.get("name") ?? ""
            )
            return try await signedIn(request) { session in
                guard let (_, clip) = try await ownedClip(session, device: device, id: id, clips: clips),
                    let index = clip.clip.files.firstIndex(where: { $0.name == name }), clip.have[index] == clip.clip.files[index].bytes,
                    let path = clips.path(device: device, id: id, name: name)
                else { return noSuchEvent(session) }
                return try await file(
                    request, context: context, path: path, size: clip.clip.files[index].bytes,
                    download: request.uri.queryParameters.get("download") == "1" ? name : nil)
            }
        }
        router.post("/events/:device/:id/delete") { request, context in
            let (device, id) = (context.parameters.get("device") ?? "", context.parameters.get("id") ?? "")
            return try await signedInForm(request) { session, _ in
                guard try await ownedClip(session, device: device, id: id, clips: clips) != nil,
                    try await NIOThreadPool.singleton.runIfActive({ try clips.delete(device: device, id: id) })
                else { return noSuchEvent(session) }
                logger.notice("owner deleted a clip", metadata: ["owner": "\(session.owner)", "device": "\(device)", "clip": "\(id)"])
                return try await eventsPage(request, session, clips: clips, notice: t("The event and its video were deleted."))
            }
        }
        guard let shareLinks else { return }
        router.post("/events/:device/:id/share") { request, context in
            let (device, id) = (context.parameters.get("device") ?? "", context.parameters.get("id") ?? "")
            return try await signedInForm(request) { session, form in
                guard let (car, clip) = try await ownedClip(session, device: device, id: id, clips: clips) else {
                    return noSuchEvent(session)
                }
                let days = Int(form["days"] ?? "").flatMap { Self.shareDays.contains($0) ? $0 : nil } ?? 7
                let created = now()
                let share = ClipShare(id: Self.shareID(), createdAtMs: created, expiresAtMs: created + Int64(days) * 86_400_000)
                guard try await NIOThreadPool.singleton.runIfActive({ try clips.putShare(share, device: device, id: id) }) else {
                    return noSuchEvent(session)
                }
                logger.notice("owner shared a clip", metadata: ["owner": "\(session.owner)", "clip": "\(id)", "days": "\(days)"])
                return try await eventPage(
                    request, session, car: car, clip: clip, clips: clips,
                    notice: t(
                        "A link that works for {days} is below. Anyone who has it sees this event's video, and nothing else.",
                        ["days": t.days(days)]))
            }
        }
        router.post("/events/:device/:id/shares/:share/revoke") { request, context in
            let (device, id, shareID) = (
                context.parameters.get("device") ?? "", context.parameters.get("id") ?? "", context.parameters.get("share") ?? ""
            )
            return try await signedInForm(request) { session, _ in
                guard let (car, clip) = try await ownedClip(session, device: device, id: id, clips: clips),
                    var share = try await NIOThreadPool.singleton.runIfActive({
                        try clips.shares(device: device, id: id).first { $0.id == shareID }
                    })
                else { return noSuchEvent(session) }
                share.revoked = true
                _ = try await NIOThreadPool.singleton.runIfActive { [share] in try clips.putShare(share, device: device, id: id) }
                logger.notice("owner revoked a clip's link", metadata: ["owner": "\(session.owner)", "clip": "\(id)"])
                return try await eventPage(request, session, car: car, clip: clip, clips: clips, notice: t("That link no longer works."))
            }
        }
        router.get("/shared/:token") { request, context in
            let token = context.parameters.get("token") ?? ""
            return try await shared(request, context, token: token, links: shareLinks, clips: clips) { grant, clip in
                // The viewer has no settings: UTC, written in their browser's language.
                let clock = OwnerClock(timeZone: nil, language: t.language)
                var values = Self.eventRow(
                    clip, car: OwnedDevice(device: grant.device, label: "", pairedAtMs: 0, lastSeenAtMs: nil, recentGuidance: []),
                    clock: clock)
                values["title"] = "\(Self.kindText(clip.clip.kind)), \(values["time"] ?? "")"
                values["expires"] = clock.text(grant.expires * 1000)
                values["files"] = try await fileRows(clip, device: grant.device, clips: clips, urlBase: "/shared/\(token)")
                values["anyHEVC"] = (values["files"] as? [[String: Any]])?.contains { $0["hevc"] as? Bool == true } ?? false
                return html(.ok, render("shared", values))
            }
        }
        router.get("/shared/:token/files/:name") { request, context in
            let (token, name) = (context.parameters.get("token") ?? "", context.parameters.get("name") ?? "")
            return try await shared(request, context, token: token, links: shareLinks, clips: clips) { grant, clip in
                guard let index = clip.clip.files.firstIndex(where: { $0.name == name }), clip.have[index] == clip.clip.files[index].bytes,
                    let path = clips.path(device: grant.device, id: grant.clip, name: name)
                else { return html(.notFound, render("message", ["title": t("No such file")])) }
                return try await file(
                    request, context: context, path: path, size: clip.clip.files[index].bytes,
                    download: request.uri.queryParameters.get("download") == "1" ? name : nil)
            }
        }
    }

    static let shareDays = [1, 7, 30]

    /// `scheme://host[:port]` of `pairing.verificationURI`, where owners reach the pages.
    static func origin(of uri: String?) -> String? {
        guard let uri, let parts = URLComponents(string: uri), let scheme = parts.scheme, ["http", "https"].contains(scheme),
            let host = parts.host, !host.isEmpty
        else { return nil }
        return "\(scheme)://\(parts.percentEncodedHost ?? host)" + (parts.port.map { ":\($0)" } ?? "")
    }

    /// The request's host if it is a plain host name or address with an optional port (nothing
    /// else a client could put there: no user, no path); otherwise no origin (a relative link).
    static func origin(host: String?, secure: Bool) -> String {
        guard let host, !host.isEmpty, host.utf8.count <= 255,
            host.unicodeScalars.allSatisfy({
                $0.isASCII && (CharacterSet.alphanumerics.contains($0) || ".-:[]".unicodeScalars.contains($0))
            })
        else { return "" }
        return (secure ? "https://" : "http://") + host
    }

    static func shareID() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%016llx", generator.next() as UInt64)
    }

    /// A shared link's clip, if the link is one this server signed, not expired, not revoked,
    /// and its clip is still kept; otherwise one answer for every reason. Counted per client
    /// address (a link is 256 bits: this only bounds the work a stranger makes).
    private func shared(
        _ request: Request, _ context: GuidanceRequestContext, token: String, links: ShareLinks, clips: any ClipStore,
        _ body: (ShareLinks.Grant, StoredClip) async throws -> Response
    ) async throws -> Response {
        let throttle = Throttle("share-address:\(Self.address(request, context))", CodeEntryLimiter.linksPerAddress)
        let tried = now()
        if let wait = try await store.attempt([throttle], nowMs: tried) {
            var response = html(
                .tooManyRequests,
                render(
                    "message", ["title": t("Too many tries"), "problem": t("Try again in {wait}.", ["wait": t.minutes(Self.minutes(wait))])]
                ))
            response.headers[.retryAfter] = "\(max(1, wait))"
            return response
        }
        guard let grant = links.verify(token, nowSeconds: tried / 1000),
            let (share, clip) = try await NIOThreadPool.singleton.runIfActive({ () throws -> (ClipShare, StoredClip)? in
                guard let share = try clips.shares(device: grant.device, id: grant.clip).first(where: { $0.id == grant.share }),
                    let clip = try clips.clip(device: grant.device, id: grant.clip)
                else { return nil }
                return (share, clip)
            }),
            share.isLive(nowMs: tried), share.expiresAtMs / 1000 == grant.expires,
            // The car is still the owner's who made the link: unpaired (or paired again to
            // someone else), its links are over, as its events are to them.
            try await store.devices(owner: grant.owner).contains(where: { $0.device == grant.device })
        else {
            noisy.log(logger, .notice, "a shared link was refused (not signed here, expired, revoked, or its clip deleted)")
            return html(
                .notFound,
                render(
                    "message",
                    [
                        "title": t("This link does not work"),
                        "problem": t("It has expired, was withdrawn by the car's owner, or its video was deleted.")
                    ]))
        }
        try await store.forgive([throttle.key], atMs: tried)
        return try await body(grant, clip)
    }

    private func noSuchEvent(_ session: WebSession) -> Response {
        page("message", session, ["title": t("No such event"), "next": "/events", "nextLabel": t("Back to the events")], status: .notFound)
    }

    /// The clip, if its car is the owner's.
    private func ownedClip(_ session: WebSession, device: String, id: String, clips: any ClipStore) async throws -> (
        OwnedDevice, StoredClip
    )? {
        guard ClientMessage.Clip.isClipID(id), let car = try await store.devices(owner: session.owner).first(where: { $0.device == device })
        else { return nil }
        let found = try await NIOThreadPool.singleton.runIfActive { try clips.clip(device: device, id: id) }
        return found.map { (car, $0) }
    }

    private func eventsPage(_ request: Request, _ session: WebSession, clips: any ClipStore, notice: String?) async throws -> Response {
        let cars = try await store.devices(owner: session.owner)
        let clock = try await ownerClock(session)
        var rows: [(at: String, row: [String: Any])] = []
        var used = 0
        for car in cars {
            let held = try await NIOThreadPool.singleton.runIfActive { try clips.clips(device: car.device) }
            for stored in held {
                rows.append((stored.clip.at, Self.eventRow(stored, car: car, clock: clock)))
                used += ClipQuota.bytes(stored.clip)
            }
        }
        var values: [String: Any] = ["title": t("Events"), "events": rows.sorted { $0.at > $1.at }.map(\.row), "hasEvents": !rows.isEmpty]
        if let limit = clipBytesPerOwner {
            values["storage"] = t(
                "Your events take {used} of the {limit} your account keeps.", ["used": Self.megabytes(used), "limit": Self.megabytes(limit)]
            )
            // A clip past the limit waits in its car (ClipQuota): the owner is the one who can make room.
            if used >= limit - limit / 10 {
                values["storageFull"] = t("Your storage is nearly full. New events wait in the car until you delete older ones here.")
            }
        }
        if let notice { values["notice"] = notice }
        if !clock.isZoneChosen { values["askZone"] = true }
        return page("events", session, values)
    }

    private func eventPage(
        _ request: Request, _ session: WebSession, car: OwnedDevice, clip: StoredClip, clips: any ClipStore,
        notice: String? = nil
    ) async throws -> Response {
        let files = try await fileRows(clip, device: car.device, clips: clips, urlBase: "/events/\(car.device)/\(clip.clip.id)")
        let clock = try await ownerClock(session)
        var values = Self.eventRow(clip, car: car, clock: clock)
        values["title"] = "\(Self.kindText(clip.clip.kind)), \(values["time"] ?? "")"
        values["files"] = files
        values["anyHEVC"] = files.contains { $0["hevc"] as? Bool == true }
        if let notice { values["notice"] = notice }
        if let shareLinks {
            let origin = publicOrigin ?? Self.origin(host: request.head.authority, secure: secureCookies)
            let at = now()
            let shares = try await NIOThreadPool.singleton.runIfActive { try clips.shares(device: car.device, id: clip.clip.id) }
            values["sharing"] = true
            values["shareDays"] = Self.shareDays.map { ["days": $0, "label": t.days($0), "selected": $0 == 7] }
            values["shares"] = shares.map { share -> [String: Any] in
                var row: [String: Any] = [
                    "share": share.id, "created": clock.text(share.createdAtMs), "expires": clock.text(share.expiresAtMs)
                ]
                if share.isLive(nowMs: at) {
                    row["live"] = true
                    row["link"] =
                        origin + "/shared/"
                        + shareLinks.token(
                            .init(
                                owner: session.owner, device: car.device, clip: clip.clip.id, share: share.id,
                                expires: share.expiresAtMs / 1000))
                } else {
                    row["state"] = share.revoked ? t("revoked") : t("expired")
                }
                return row
            }
        }
        return page("event", session, values)
    }

    /// Each file of a clip: playable here or HEVC (download only), or still uploading.
    private func fileRows(_ clip: StoredClip, device: String, clips: any ClipStore, urlBase: String) async throws -> [[String: Any]] {
        var files: [[String: Any]] = []
        for (file, have) in zip(clip.clip.files, clip.have) {
            var row: [String: Any] = ["name": file.name, "size": Self.megabytes(file.bytes)]
            if have == file.bytes, let path = clips.path(device: device, id: clip.clip.id, name: file.name) {
                let codec = try await NIOThreadPool.singleton.runIfActive {
                    VideoCodecSniffer.shared.codec(ofFile: path, bytes: file.bytes)
                }
                row["url"] = "\(urlBase)/files/\(file.name)"
                row["playable"] = codec != .hevc
                row["hevc"] = codec == .hevc
            } else {
                row["uploading"] = t("{have} of {size} uploaded", ["have": Self.megabytes(have), "size": Self.megabytes(file.bytes)])
            }
            files.append(row)
        }
        return files
    }

    /// What the list and the page show of a clip.
    static func eventRow(_ stored: StoredClip, car: OwnedDevice, clock: OwnerClock) -> [String: Any] {
        let clip = stored.clip
        let t = PageText.current
        var row: [String: Any] = [
            "device": car.device, "id": clip.id, "car": car.label, "kind": kindText(clip.kind),
            "time": Date(rfc3339: clip.at).map { clock.text(Int64($0.timeIntervalSince1970 * 1000)) } ?? clip.at,
            "state": stored.isStored
                ? t("whole")
                : t(
                    "uploading: {have} of {size}",
                    ["have": megabytes(stored.have.reduce(0, +)), "size": megabytes(clip.files.reduce(0) { $0 + $1.bytes })])
        ]
        if let peakG = clip.peakG { row["peakG"] = t.number(peakG, fractionDigits: 1) + " g" }
        if let place = clip.validGPS?.first(where: { $0.lat != nil && $0.lon != nil }), let lat = place.lat, let lon = place.lon {
            let (latText, lonText) = (String(format: "%.5f", lat), String(format: "%.5f", lon))
            row["place"] = "\(latText), \(lonText)"
            row["map"] = "https://www.openstreetmap.org/?mlat=\(latText)&mlon=\(lonText)#map=17/\(latText)/\(lonText)"
        }
        return row
    }

    static func kindText(_ kind: String) -> String {
        let t = PageText.current
        return switch kind {
        case "incident": t("Impact while driving")
        case "parking": t("Parked car")
        case "protect": t("Saved by hand")
        default: t("Event")
        }
    }

    static func megabytes(_ bytes: Int) -> String {
        bytes >= 1 << 20 ? String(format: "%.1f MB", Double(bytes) / 1_048_576) : "\((bytes + 1023) / 1024) KB"
    }

    /// A stored clip file, whole or the one range asked for (`206`), streamed from the disk.
    private func file(_ request: Request, context: GuidanceRequestContext, path: String, size: Int, download: String?) async throws
        -> Response
    {
        var headers: HTTPFields = [
            .contentType: "video/mp4", .acceptRanges: "bytes", .cacheControl: "private, no-store",
            .init("X-Content-Type-Options")!: "nosniff", .contentSecurityPolicy: "default-src 'none'; sandbox"
        ]
        if let download { headers[.contentDisposition] = "attachment; filename=\"\(download)\"" }
        let io = FileIO(threadPool: .singleton)
        switch ByteRange.parse(request.headers[.range], size: size) {
        case .whole:
            headers[.contentLength] = "\(size)"
            return Response(status: .ok, headers: headers, body: try await io.loadFile(path: path, context: context))
        case .part(let range):
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound)/\(size)"
            headers[.contentLength] = "\(range.count)"
            return Response(
                status: .partialContent, headers: headers, body: try await io.loadFile(path: path, range: range, context: context))
        case .unsatisfiable:
            headers[.contentRange] = "bytes */\(size)"
            headers[.contentLength] = "0"
            return Response(status: .rangeNotSatisfiable, headers: headers)
        }
    }
}

/// Which codec an MP4's video track is in, from its sample entry (`avc1`/`avc3` or `hvc1`/`hev1`),
/// looked for in the file's first and last megabyte (where `moov` is).
final class VideoCodecSniffer: Sendable {
    enum Codec: Equatable, Sendable { case h264, hevc, unknown }

    /// What was found, by path and size: a file is read once, however often its page is shown.
    private let known = Mutex<[String: (bytes: Int, codec: Codec)]>([:])
    static let shared = VideoCodecSniffer()
    static let remembered = 4096

    func codec(ofFile path: String, bytes: Int) -> Codec {
        if let found = known.withLock({ $0[path] }), found.bytes == bytes { return found.codec }
        let codec = Self.codec(ofFile: path)
        known.withLock { known in
            if known.count >= Self.remembered { known.removeAll(keepingCapacity: true) }
            known[path] = (bytes, codec)
        }
        return codec
    }

    static func codec(ofFile path: String) -> Codec {
        guard let handle = FileHandle(forReadingAtPath: path) else { return .unknown }
        defer { try? handle.close() }
        var bytes = (try? handle.read(upToCount: 1 << 20)) ?? Data()
        if let end = try? handle.seekToEnd(), end > 2 << 20 {
            try? handle.seek(toOffset: end - (1 << 20))
            bytes.append((try? handle.read(upToCount: 1 << 20)) ?? Data())
        } else {
            bytes.append((try? handle.readToEnd()) ?? Data())
        }
        for (tag, codec) in [("hvc1", Codec.hevc), ("hev1", .hevc), ("avc1", .h264), ("avc3", .h264)]
        where bytes.range(of: Data(tag.utf8)) != nil {
            return codec
        }
        return .unknown
    }
}
